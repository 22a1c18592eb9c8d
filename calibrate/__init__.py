"""Calibration: turn fortio measurements into the service-time distributions of a mesh model."""
