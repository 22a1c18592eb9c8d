"""meshsim.sim: the SimPy engine that executes a scenario (topology x mesh x workload) and its statistics."""
