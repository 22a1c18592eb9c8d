"""The SimPy reference engine (stations, components, the wired System, load generators, one replication) and what
both engines share: the replication's result types and the measures taken from a System."""
