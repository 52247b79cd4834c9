"""`check`: every claim in the table's order, written as OUT/gpu-proof.json and OUT/gpu-proof.md."""
import json
import os

from .common import STEPSCOPE, write_atomically
from .flight import claim_flight_dump, claim_flight_overhead, flight_store_facts
from .graphs import claim_graph_capture_stacks, claim_graph_node_cost, claim_graph_nodes
from .overhead import claim_launch_cost, claim_memory, claim_overhead, claim_toggled_overhead
from .samples import claims_samples
from .sessions import claim_attach, claim_doctor, claim_exits, claim_neighbour, claim_paused, claim_ranks
from .stores import all_store_facts
from .trace import claim_blocking_stacks, claim_lean, claim_launch_rows, claim_threads, claim_unique_launch_ids

def check(out, stepscope=None):
    STEPSCOPE[0] = stepscope
    with open(os.path.join(out, "runs.json")) as fh:
        runs = json.load(fh)
    runs["_out"] = out
    facts = all_store_facts(runs, out)
    claims = [claim_threads(facts), claim_launch_rows(facts), claim_unique_launch_ids(facts), claim_exits(runs),
              claim_lean(runs, facts), claim_blocking_stacks(facts),
              claim_overhead(runs, "launch_bound"), claim_overhead(runs, "trainer"), claim_toggled_overhead(runs),
              claim_memory(runs)]
    claims += claims_samples(runs, stepscope)
    claims += [claim_launch_cost(runs, facts), claim_attach(runs, facts), claim_paused(runs, facts),
               claim_ranks(runs, facts), claim_doctor(runs), claim_neighbour(runs), claim_flight_dump(runs, flight_store_facts(runs, out)),
               claim_flight_overhead(runs), claim_graph_nodes(runs), claim_graph_capture_stacks(runs),
               claim_graph_node_cost(runs)]
    machine = runs.get("machine", {})
    result = {"machine": machine, "claims": claims,
              "passed": sum(c["verdict"] == "PASS" for c in claims), "total": len(claims)}
    write_atomically(os.path.join(out, "gpu-proof.json"), json.dumps(result, indent=1) + "\n")
    write_atomically(os.path.join(out, "gpu-proof.md"), markdown(result))
    return result


def markdown(result):
    m = result["machine"]
    esc = lambda s: str(s).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    lines = [f"# GPU proof: {result['passed']} of {result['total']} claims PASS", "",
             f"{m.get('gpu', 'GPU unknown')}, driver {m.get('driver', '?')}, {m.get('torch', 'torch ?')}, "
             f"{m.get('stepscope', 'stepscope ?')}, {m.get('date', '')} (run took {m.get('run_s', '?')} s)", "",
             "| claim | measured | expected | verdict |", "|---|---|---|---|"]
    for c in result["claims"]:
        lines.append(f"| {esc(c['claim'])} | {esc(c['measured'])} | {esc(c['expected'])} | {c['verdict']} |")
    return "\n".join(lines) + "\n"
