"""meshsim.measurements: real probe results with their provenance. Data, not code."""
