"""The command line's words for the library's fields: errors name fields, the CLI says flags."""

from __future__ import annotations

from meshsim.errors import FieldError, MeshsimError


def comma_list(text: str) -> tuple[str, ...]:
    """A flag's comma list, blanks dropped (``--features mtls,tracing``, ``--mesh istio, linkerd``)."""
    return tuple(part for part in (p.strip() for p in text.split(",")) if part)

# request/option field -> flag (one table for every command: a field has one flag wherever it appears)
FIELD_FLAGS = {
    "topology": "--topology", "mesh": "--mesh", "rps": "--rps", "features": "--features", "lb": "--lb",
    "scope": "--scope", "load": "--load", "connections": "--connections", "threads": "--threads",
    "uniform": "--uniform", "jitter": "--jitter", "nocatchup": "--nocatchup", "think_ms": "--think",
    "profile": "--profile", "keepalive": "--no-keepalive", "tls": "--tls", "payload_bytes": "--payload",
    "proxy_workers": "--proxy-workers", "proxy_cpu_limit": "--proxy-cpu-limit", "duration_s": "--duration", "warmup_s": "--warmup",
    "replications": "--replications", "min_replications": "--min-replications", "precision": "--precision",
    "seed": "--seed", "processes": "--processes",
    "max_error_fraction": "--max-errors", "workers": "--workers", "cpu_limit": "--cpu-limit", "cpus": "--cpus",
    "mode": "--mode", "state_dir": "--state-dir", "plan": "--plan", "model": "--model",
    "sim_duration_s": "--sim-duration", "fail_above": "--fail-above", "html": "--html", "out": "--out",
    "rates": "--lab-rates", "payloads": "--lab-payloads", "max_events": "--max-events", "time_limit_s": "--time-limit",
    "factors": "--factor", "timeseries_s": "--timeseries", "timeseries_csv": "--timeseries-csv",
    "engine": "--engine", "cluster": "--cluster", "leaf_delay_ms": "--leaf-delay",
    "stdout": "stdout",  # the command's result stream (meshsim.outputs): no flag names it
}


def flag_of(field: str) -> str:
    return FIELD_FLAGS.get(field, f"--{field.replace('_', '-')}")


def user_message(exc: MeshsimError, overrides: dict[str, str] | None = None) -> str:
    """The one line the CLI prints: a FieldError's field said as the command's flag."""
    if isinstance(exc, FieldError):
        flag = (overrides or {}).get(exc.field) or flag_of(exc.field)
        return f"{flag}: {exc.problem}"
    return str(exc)
