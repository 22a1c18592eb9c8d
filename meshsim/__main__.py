from meshsim.cli import main

raise SystemExit(main())
