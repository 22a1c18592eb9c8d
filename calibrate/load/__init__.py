"""Load dependence: what runs at several rates and connection counts add to a fitted model (worker wake-ups, cold
wakes replayed from simulated idle gaps, CPU per request)."""
