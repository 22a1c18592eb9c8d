"""fortio result reader: both formats, access logs, provenance, quality flags and bad input."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import fortio_echo_server, require_component

from meshsim.calibrate.measure.dataset import load_run, load_runs
from meshsim.calibrate.measure.fortio_histogram import result_json
from meshsim.calibrate.measure.fortio_result import read_result
from meshsim.calibrate.measure.quality import assess
from meshsim.calibrate.measure.tables import measurements_dir
from meshsim.errors import ModelError

ISTIO12 = measurements_dir() / "istio-1.2.0"
BOTH_MIXER = ISTIO12 / "istio-1.2.0-c1-qps1000-both-sidecars-mixer"
BASELINE = ISTIO12 / "istio-1.2.0-c1-qps1000-baseline"


def test_old_format_reads_with_provenance() -> None:
    r = read_result(BASELINE / "fortio.json")
    assert r.version == "1.3.1"
    assert r.requested_rps == 1000.0  # a string "1000" in this format
    assert r.uniform is None and r.jitter is None  # not recorded by 1.3.1
    assert r.count == 240000 == sum(b.count for b in r.buckets)
    assert r.buckets[0].start == r.min_s and r.buckets[-1].end == r.max_s
    assert r.payload_bytes == 1024 and r.num_threads == 1
    assert r.provenance()["labels"] == "193ff770_qps_1000_c_1_1024_base"


def test_requested_rps_as_number_and_max(tmp_path: Path) -> None:
    data = json.loads((BASELINE / "fortio.json").read_text())
    data["RequestedQPS"] = 1000
    (tmp_path / "a.json").write_text(json.dumps(data))
    assert read_result(tmp_path / "a.json").requested_rps == 1000.0
    data["RequestedQPS"] = "max"
    (tmp_path / "b.json").write_text(json.dumps(data))
    assert read_result(tmp_path / "b.json").requested_rps is None


def test_saturated_and_failed_runs_are_flagged(tmp_path: Path) -> None:
    q = assess(read_result(BOTH_MIXER / "fortio.json"))
    assert q.status == "saturated" and "742" in q.reasons[0]
    assert assess(read_result(BASELINE / "fortio.json")).ok
    data = result_json([0.001] * 1000, 1e-5, requested_rps=100, ret_codes={"200": 950, "503": 40, "-1": 10})
    (tmp_path / "f.json").write_text(json.dumps(data))
    q = assess(read_result(tmp_path / "f.json"))
    assert q.status == "failed" and "503: 40" in q.reasons[0] and "-1: 10" in q.reasons[0]


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda d: d.pop("DurationHistogram"), "DurationHistogram: missing"),
        (lambda d: d["DurationHistogram"].update(Count=0, Data=[]), "zero or missing"),
        (lambda d: d.pop("Labels"), "Labels: missing; a result without its provenance"),
        (lambda d: d["DurationHistogram"]["Data"][0].update(Count=5), "bucket counts sum to"),
    ],
)
def test_bad_results_name_the_file(tmp_path: Path, mutate, expected: str) -> None:
    data = json.loads((BASELINE / "fortio.json").read_text())
    mutate(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ModelError) as err:
        read_result(path)
    assert str(path) in str(err.value) and expected in str(err.value)
    assert "\n" not in str(err.value)


def test_truncated_and_non_json(tmp_path: Path) -> None:
    raw = (BASELINE / "fortio.json").read_text()
    (tmp_path / "t.json").write_text(raw[: len(raw) // 2])
    (tmp_path / "n.json").write_text("<html>not json</html>")
    for name in ("t.json", "n.json"):
        with pytest.raises(ModelError, match=f"{tmp_path / name}: not valid JSON"):
            read_result(tmp_path / name)


def _copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_batch_keeps_good_runs_and_reports_each_bad_one(tmp_path: Path) -> None:
    good = _copy_run(BASELINE, tmp_path / "good")
    truncated = _copy_run(BASELINE, tmp_path / "truncated")
    (truncated / "fortio.json").write_text((truncated / "fortio.json").read_text()[:500])
    badmode = _copy_run(BASELINE, tmp_path / "badmode")
    manifest = (badmode / "manifest.yaml").read_text().replace("path: baseline", "path: sidecar-everywhere")
    (badmode / "manifest.yaml").write_text(manifest)
    batch = load_runs([good, truncated, badmode, tmp_path / "missing"])
    assert [r.folder for r in batch.runs] == [good]
    assert len(batch.errors) == 3
    assert any(str(truncated / "fortio.json") in e and "not valid JSON" in e for e in batch.errors)
    assert any(str(badmode / "manifest.yaml") in e and "unknown mode 'sidecar-everywhere'" in e for e in batch.errors)
    assert any(str(tmp_path / "missing") in e for e in batch.errors)



def test_todays_fortio_with_access_log(tmp_path: Path) -> None:
    """Real fortio 1.68: serve echo on loopback, load it, read result JSON and the per-request access log."""
    fortio = require_component("fortio")
    with fortio_echo_server(fortio, tmp_path) as port:
        subprocess.run(
            [str(fortio), "load", "-qps", "200", "-c", "2", "-n", "300", "-r", "0.00001", "-uniform",
             "-labels", "meshsim test", "-json", str(tmp_path / "fortio.json"),
             "-access-log-file", str(tmp_path / "access.jsonl"), f"http://127.0.0.1:{port}/echo?size=512"],
            check=True, capture_output=True, timeout=60)
    r = read_result(tmp_path / "fortio.json", tmp_path / "access.jsonl")
    assert r.version.startswith("1.68") and r.uniform is True and r.jitter is False and r.nocatchup is False
    assert r.requested_rps == 200.0 and r.num_threads == 2 and r.labels == "meshsim test"
    assert r.resolution_s == pytest.approx(1e-5)
    assert r.samples is not None and abs(r.samples.size - r.count) <= 2
    assert r.min_s <= r.samples.min() + 1e-6 and r.samples.max() <= r.max_s + 1e-6
    lines = (tmp_path / "access.jsonl").read_text().splitlines()
    (tmp_path / "access.jsonl").write_text("\n".join(lines[:5] + ["{not json"]))
    with pytest.raises(ModelError, match="line 6: not a fortio access-log entry"):
        read_result(tmp_path / "fortio.json", tmp_path / "access.jsonl")


def test_run_folder_prefers_raw_samples(tmp_path: Path) -> None:
    run = _copy_run(BASELINE, tmp_path / "run")
    (run / "access.jsonl").write_text("\n".join(json.dumps({"latency": 0.0003 + i * 1e-6, "timestamp": i,
                                                            "thread": 0, "ok": True}) for i in range(100)))
    loaded = load_run(run)
    assert loaded.result.samples is not None and loaded.result.samples.size == 100


def test_histogram_percentiles_read_exactly_as_fortio_reports_them() -> None:
    """Linear interpolation inside buckets: our reading gives fortio's own Percentiles for every shipped run."""
    from meshsim.calibrate.fit.observations import from_result

    for run in load_runs([ISTIO12]).runs:
        published = json.loads((run.folder / "fortio.json").read_text())["DurationHistogram"]["Percentiles"]
        obs = from_result(run.result)
        for p in published:
            assert obs.quantile(p["Percentile"] / 100) == pytest.approx(p["Value"], rel=1e-9), (run.id, p)


def test_a_compressed_access_log_is_read_like_the_plain_one(tmp_path: Path) -> None:
    """Shipped run folders keep raw samples gzipped (access.jsonl.gz) while the manifest still names access.jsonl."""
    import gzip

    shipped = next(p.parent for p in sorted((measurements_dir() / "istio-1.2.0").rglob("manifest.yaml")))
    folder = tmp_path / shipped.name
    shutil.copytree(shipped, folder)
    lines = "".join(json.dumps({"latency": 1e-4 * (1 + i % 7), "ok": i % 50 != 0}) + "\n" for i in range(700))
    (folder / "access.jsonl").write_text(lines)
    plain = load_runs([folder]).runs[0]
    with gzip.open(folder / "access.jsonl.gz", "wt") as fh:
        fh.write(lines)
    (folder / "access.jsonl").unlink()
    packed = load_runs([folder]).runs[0]
    assert plain.result.samples is not None and packed.result.samples is not None
    assert packed.result.samples.size == 700 - 14  # failed requests (ok: false) are not latencies
    assert np.array_equal(plain.result.samples, packed.result.samples)
