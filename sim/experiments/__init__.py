"""The experiments that drive the engines: a prediction and its replications, the saturation search, sweeps,
capacity search and sizing, factorial designs, the cost budget and the statistics over replications."""
