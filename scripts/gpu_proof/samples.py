"""Claims on the bundled samples: findings as samples/variants.txt expects, each estimated saving against its measured
cure, and the what-if replay's step against the cure's."""
import json
import os
import subprocess

from .common import claim, not_run, read_text, read_variants, resolve, step_times

MAX_SAVING_ERROR = 0.25  # |estimated - measured| / measured
MAX_REPLAY_ERROR = 0.15  # |replayed cure step / the cure's measured step - 1| (issue 27)

def analysis_of(samples_dir, name, stepscope):
    """The sample's analysis JSON (record-samples.sh writes NAME.json; made here when absent)."""
    path = os.path.join(samples_dir, name + ".json")
    if not os.path.exists(path) and stepscope and os.path.exists(os.path.join(samples_dir, name + ".db")):
        r = subprocess.run([stepscope, "analyze", "--json", os.path.join(samples_dir, name + ".db")],
                           capture_output=True, text=True)
        if r.returncode == 0:
            with open(path, "w") as f:
                f.write(r.stdout)
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def saving_per_step(analysis, finding):
    """A finding's saving per step of the run (µs): its share of the summed traced step time × the mean traced
    step. est_savings_us_per_step is the mean over the steps it affects only — one slow step's figure when the
    finding is in one step — while a cure is measured as the difference of whole runs' step medians."""
    steps = analysis.get("steps", [])
    traced = [s["dur_us"] for s in steps if s.get("gpu_traced")] or [s["dur_us"] for s in steps]
    if not traced or "share" not in finding:
        return finding.get("est_savings_us_per_step", 0.0)
    return finding["share"] * sum(traced) / len(traced)


def claims_samples(runs, stepscope):
    """Per variant: findings as samples/variants.txt expects; per problem: the estimate against its cure."""
    samples_dir = resolve(runs["_out"], runs.get("samples_dir", "samples"))
    out = []
    variants = read_variants()
    plain = {v["name"]: step_times(read_text(os.path.join(samples_dir, v["name"] + ".plain.log")))
             for v in variants}
    for v in variants:
        name = v["name"]
        text = f"sample {name}: findings as expected"
        expected = "; ".join(x for x in ("has " + ", ".join(v["must"]) if v["must"] else "",
                                         "not " + ", ".join(v["mustnot"]) if v["mustnot"] else "") if x)
        a = analysis_of(samples_dir, name, stepscope)
        if a is None:
            out.append(not_run(f"sample:{name}", text, expected, "no recording or analysis"))
            continue
        found = {f["rule"]: f for f in a.get("findings", [])}
        missing = [r for r in v["must"] if r not in found]
        unwanted = [r for r in v["mustnot"] if r in found]
        cells = ", ".join(f"{r} {f.get('severity')} {f.get('est_savings_us_per_step', 0):.1f} µs" for r, f in
                          found.items()) or "no findings"
        out.append(claim(f"sample:{name}", text, cells, expected,
                         "FAIL" if missing or unwanted else "PASS", missing=missing, unwanted=unwanted))
        if not v["cure"] or not v["must"]:
            continue
        rule = v["must"][0]
        text = f"sample {name}: the {rule} saving against its cure {v['cure']}"
        expected = f"estimate within {100 * MAX_SAVING_ERROR:g}% of plain {name} − plain {v['cure']} (step medians)"
        p, c = plain.get(name), plain.get(v["cure"])
        if not p or not c or rule not in found:
            out.append(not_run(f"cure:{name}", text, expected,
                               "no timing line in a plain log" if not p or not c else f"no {rule} finding"))
            continue
        measured = p[0] - c[0]
        est = saving_per_step(a, found[rule])
        err = abs(est - measured) / measured if measured > 0 else float("inf")
        out.append(claim(f"cure:{name}", text,
                         f"estimated {est:.1f} µs, measured {measured:.1f} µs ({p[0]:.1f} → {c[0]:.1f}): "
                         f"{100 * (est / measured - 1) if measured > 0 else 0:+.0f}%", expected,
                         "PASS" if err <= MAX_SAVING_ERROR else "FAIL", estimated_us=est, measured_us=measured))
        # The what-if replay (docs/critical-path.md): the recording replayed with the cure, against the cure's step.
        text = f"sample {name}: the what-if step with the {rule} cure against {v['cure']}'s step"
        expected = f"within {100 * MAX_REPLAY_ERROR:g}% of plain {v['cure']} (step median)"
        replayed = found[rule].get("replayed")
        if not replayed:
            out.append(not_run(f"replay:{name}", text, expected, "no what-if replay in the analysis"))
            continue
        pred = replayed["step_us"]
        off = pred / c[0] - 1 if c[0] > 0 else float("inf")
        out.append(claim(f"replay:{name}", text,
                         f"replayed with {replayed['cure']}: {pred:.1f} µs; {v['cure']} measured {c[0]:.1f} µs: "
                         f"{100 * off:+.0f}%", expected, "PASS" if abs(off) <= MAX_REPLAY_ERROR else "FAIL",
                         predicted_us=pred, measured_us=c[0]))
    return out
