"""meshsim.models: the shipped YAML data (topologies/, meshes/). Data, not code."""
