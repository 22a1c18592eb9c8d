import sys
import patch  # noqa: F401
from meshsim.cli import main
sys.exit(main(sys.argv[1:]))
