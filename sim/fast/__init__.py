"""The compiled engine: the SimPy System lowered to ops and tables, run by a numba loop (built once into a native
module); the same results as the SimPy engine, bit for bit."""
