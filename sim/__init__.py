"""meshsim.sim: the engines that execute a scenario (topology x mesh x workload) and the experiments that drive them.

``engine/`` is the SimPy reference engine and the result types both engines share, ``fast/`` the compiled engine,
``engine_choice`` the one place that picks between them and runs a replication, ``experiments/`` the predictions,
searches, sweeps and designs built on replications (ARCHITECTURE.md)."""
