"""The fit's acceptance (meshsim/calibrate/fit/acceptance.py): degenerate or badly fitting candidates are refused
and the next one by AIC is taken; a component with none is one error naming it and its runs (FitRefused), and the
lab loop measures its calibration once more when that happens. Found on real lab data (gamma shape 3e-5, KS 0.66)."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from meshsim.calibrate.fit.acceptance import KS_MAX, choose, problem
from meshsim.calibrate.fit_runs import fit_runs
from meshsim.catalog import load_mesh
from meshsim.distributions import Gamma, LogNormal, Mixture, Shifted
from meshsim.errors import MeshsimError

# fresh_draws: an autouse fixture
from synthetic_passes import (BASE, GAMMA, INBOUND, fresh_draws, sum_of, write_pass_run)  # noqa: F401


def test_a_candidate_whose_mean_lies_mostly_beyond_the_data_is_refused() -> None:
    """The mixture the lab fit of 2026-11-28 kept for a client sidecar's pass (KS 0.25, kept as the least bad): its
    tail component (median 0.37 us, sigma 3.8) put 56 % of the pass's 0.42 ms mean above the run's 8.7 ms maximum,
    and the validation booked that sidecar 2.7x its measured CPU. A lognormal with sigma 2 keeps 86 % of its mean
    below its own 99.9th percentile and passes; so does the mixture's body alone."""
    tail = Shifted(LogNormal(math.log(0.3652e-6), 3.815), 0.08468e-3)
    body = Shifted(LogNormal(math.log(0.1646e-3), 0.05), 0.0576e-3)
    assert "56% of its mean (0.418 ms) beyond the data's largest value (8.68 ms)" in problem(
        Mixture((0.5, 0.5), (tail, body)), 0.01, data_max_s=8.676e-3)
    wide = LogNormal(math.log(0.2e-3), 2.0)
    assert problem(wide, 0.01, data_max_s=wide.quantile(0.999)) == ""
    assert "beyond the data's largest value" in problem(wide, 0.01, data_max_s=wide.quantile(0.99))
    assert problem(body, 0.01, data_max_s=8.676e-3) == ""
    # the kept-despite-KS fallback refuses it too: the next candidate is taken
    index, rejected = choose(["mixture", "gamma"], [Mixture((0.5, 0.5), (tail, body)), Gamma(4.0, 0.05e-3)],
                             [0.2, 0.25], 8.676e-3, "proxy.outbound_pass", ["run-a"])
    assert index == 1, rejected


def test_degenerate_and_badly_fitting_candidates_are_refused() -> None:
    lab_failure = Gamma(2.65e-5, 13.49)  # the outbound pass the lab fit wrote
    assert "shape" in problem(lab_failure, 0.01, data_max_s=2e-3)
    assert "scale" in problem(Gamma(2.0, 1.0), 0.01, data_max_s=2e-3)
    assert "sigma" in problem(LogNormal(math.log(1e-4), 7.7), 0.01, data_max_s=2e-3)
    assert "KS" in problem(Gamma(2.0, 0.05e-3), 0.66, data_max_s=2e-3)
    assert "KS" in problem(Gamma(2.0, 0.05e-3), float("nan"), data_max_s=2e-3)
    assert problem(Gamma(2.0, 0.05e-3), KS_MAX / 2, data_max_s=2e-3) == ""
    # a light mixture component whose median ran off to zero: a model file could not hold it (the lab's fit wrote
    # median_ms 0.0 once, then failed reading its own model back)
    collapsed = Mixture((0.9995, 0.0005), (LogNormal(math.log(1e-4), 0.3), LogNormal(-900.0, 0.3)))
    assert "collapsed" in problem(collapsed, 0.01, data_max_s=2e-3)
    # the next candidate by AIC is taken, and the reason for skipping the first is kept
    index, rejected = choose(["gamma", "lognormal"], [lab_failure, LogNormal(math.log(1e-4), 0.5)], [0.01, 0.02],
                             2e-3, "proxy.outbound_pass", ["run-a"])
    assert index == 1 and rejected and rejected[0].startswith("gamma: degenerate shape")
    with pytest.raises(MeshsimError, match=r"proxy.outbound_pass from runs run-a.*no acceptable candidate"):
        choose(["gamma"], [lab_failure], [0.66], 2e-3, "proxy.outbound_pass", ["run-a"])


def test_a_refused_fit_names_its_component_and_runs() -> None:
    from meshsim.calibrate.fit.acceptance import KS_HARD, FitRefused

    dist = Shifted(LogNormal(-9.0, 0.3), 1e-4)
    with pytest.raises(FitRefused) as caught:
        choose(["shifted lognormal"], [dist], [KS_HARD + 0.01], 0.01, "proxy.outbound_pass", ["run-a", "run-b"])
    assert caught.value.component == "proxy.outbound_pass" and caught.value.runs == ("run-a", "run-b")
    assert isinstance(caught.value, MeshsimError) and "run-a, run-b" in str(caught.value)


def test_lab_validation_measures_its_calibration_once_more_when_the_fit_refuses_a_run(tmp_path: Path) -> None:
    """The retry policy of ``validate_lab`` (the lab itself is exercised by tests/test_validate_lab.py): a refused
    fit measures the plan again into a fresh folder, once; a second refusal is the answer."""
    from meshsim.calibrate.fit.acceptance import FitRefused
    from meshsim.calibrate.validation.lab_loop import PLANS, calibrate_with_one_retry

    folders: list[Path] = []

    def refusing(times: int):
        def calibrate_lab(plan, report_progress):
            out_dir = plan.out_dir
            folders.append(out_dir)
            if len(folders) <= times:
                raise FitRefused("refused", "proxy.outbound_pass", [f"{out_dir.name}/run-1"])
            return SimpleNamespace(run_dirs=(out_dir / "run-1",))
        return calibrate_lab

    lines: list[str] = []
    cal = calibrate_with_one_retry(refusing(1), PLANS["small"], "envoy-lab", tmp_path, tmp_path / "m.yaml",
                                   lines.append)
    assert folders == [tmp_path / "calibration", tmp_path / "calibration-again"]
    assert cal.run_dirs == (tmp_path / "calibration-again" / "run-1",)
    assert any("calibration/run-1" in line and "once more" in line for line in lines)
    folders.clear()
    with pytest.raises(FitRefused):
        calibrate_with_one_retry(refusing(2), PLANS["small"], "envoy-lab", tmp_path, tmp_path / "m.yaml", lines.append)
    assert len(folders) == 2


# -- failed fits are refused -------------------------------------------------------------------------------------

def test_unfittable_component_is_one_error_and_no_model_written(tmp_path: Path) -> None:
    """A sidecar run faster than its baseline (noise larger than the component): no pass can reproduce it."""
    write_pass_run(tmp_path, "base", "baseline", 1000.0, sum_of(BASE))
    write_pass_run(tmp_path, "server", "server-sidecar", 1000.0, sum_of(BASE) - 0.05e-3)
    out = tmp_path / "m.yaml"
    with pytest.raises(MeshsimError) as err:
        fit_runs([tmp_path], "envoy-bad", out, families=GAMMA)
    msg = str(err.value)
    assert "\n" not in msg and "proxy.inbound_pass" in msg and "server" in msg and "KS" in msg
    assert not out.exists()


def test_unfittable_feature_is_left_out_with_a_note(tmp_path: Path) -> None:
    """mTLS runs no slower than plaintext ones (the lab on a noisy machine): the model keeps the bare passes and
    drops the feature, saying why, instead of losing the whole calibration."""
    write_pass_run(tmp_path, "base", "baseline", 1000.0, sum_of(BASE))
    write_pass_run(tmp_path, "server", "server-sidecar", 1000.0, sum_of(BASE, INBOUND, INBOUND))
    manifest_dir = tmp_path / "server-mtls"
    write_pass_run(tmp_path, "server-mtls", "server-sidecar", 1000.0, sum_of(BASE) - 0.05e-3)
    data = yaml.safe_load((manifest_dir / "manifest.yaml").read_text())
    data["setup"]["features"] = ["mtls"]
    (manifest_dir / "manifest.yaml").write_text(yaml.safe_dump(data))
    out = tmp_path / "m.yaml"
    fit_runs([tmp_path], "envoy-partial", out, families=GAMMA)
    model = load_mesh(str(out))
    assert "mtls" not in model.features
    notes = yaml.safe_load(out.read_text())["calibration"]["notes"]
    assert "feature mtls: not fitted, left out of the model" in str(notes)


def test_a_lognormal_a_fitter_tries_with_a_huge_sigma_is_judged_not_overflowed() -> None:
    """A candidate with sigma 40 has a mean past any float: its median still reads exp(mu) (a refit on the lab's
    2026-11-27 runs died on OverflowError here), and its quartiles follow the closed form."""
    dist = LogNormal(-8.0, 40.0)
    assert dist.quantile(0.5) == pytest.approx(math.exp(-8.0))
    assert dist.quantile(0.75) == pytest.approx(math.exp(-8.0 + 40.0 * 0.6744897501960817))


@pytest.mark.parametrize("shortlist", [True, False], ids=["shortlist", "chosen-families"])
def test_a_shortlist_tries_every_family_before_refusing_and_a_chosen_list_does_not(tmp_path: Path,
                                                                                 shortlist: bool) -> None:
    """The lab calibration's three families are a choice of speed (calibrate/lab_calibration.py): a component none
    of them fits is tried with the other candidates before it is refused (on 2026-11-28 tracing's increment was
    refused by the three and fitted by a Weibull mixture). Families a user chose (--families) are kept as chosen."""
    from meshsim.calibrate.fit.families import Shortlist, candidates

    write_pass_run(tmp_path, "base", "baseline", 1000.0, sum_of(BASE))
    write_pass_run(tmp_path, "server", "server-sidecar", 1000.0, sum_of(BASE) - 0.05e-3)  # no pass can explain it
    families = Shortlist(GAMMA) if shortlist else GAMMA
    said: list[str] = []
    with pytest.raises(MeshsimError):
        fit_runs([tmp_path], "envoy-bad", tmp_path / "m.yaml", families=families, progress=said.append)
    tried = {line.split(": ")[1] for line in said if line.startswith("  proxy.inbound_pass: ") and "AIC" in line}
    widened = [line for line in said if "trying the other" in line]
    assert tried == ({f.name for f in candidates()} if shortlist else {GAMMA[0].name})
    assert len(widened) == (1 if shortlist else 0)
