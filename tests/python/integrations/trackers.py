"""docs/integrations.md's tracker examples, offline: `stepscope report --format metrics` logged as it is into MLflow's
local file store and as TensorBoard scalars, then read back with each tool's own reader and compared."""
import json
import os
import subprocess
import sys

store, workdir = sys.argv[1], sys.argv[2]
cli = os.environ.get("STEPSCOPE_CLI", "stepscope")

# --- the example, as docs/integrations.md gives it -------------------------------------------------------------
metrics = json.loads(subprocess.run([cli, "report", "--format", "metrics", store], check=True,
                                    capture_output=True, text=True).stdout)

os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3.x keeps file: stores behind this switch
import mlflow

mlflow.set_tracking_uri("file:" + os.path.join(workdir, "mlruns"))
with mlflow.start_run() as run:
    mlflow.log_metrics(metrics)

# (Not in the docs' example: the test venv holds tensorflow-cpu for other tests, and TensorBoard imports it when it
# can, 15 s here. Hidden after MLflow's logging, which looks for it by name, the run takes the path of a PyTorch user
# without TensorFlow: TensorBoard's own stub.)
sys.modules["tensorflow"] = None
from torch.utils.tensorboard import SummaryWriter

with SummaryWriter(os.path.join(workdir, "tb")) as writer:
    for name, value in metrics.items():
        writer.add_scalar(name, value, global_step=0)
# --------------------------------------------------------------------------------------------------------------

print("metrics", len(metrics), json.dumps(metrics, sort_keys=True))
logged = mlflow.tracking.MlflowClient().get_run(run.info.run_id).data.metrics
print("mlflow", len(logged), all(logged.get(k) == float(v) for k, v in metrics.items()))

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

acc = EventAccumulator(os.path.join(workdir, "tb"), size_guidance={"scalars": 0})
acc.Reload()
tags = acc.Tags()["scalars"]
# Event files keep float32: equal to the metric at that precision.
same = all(abs(acc.Scalars(k)[0].value - float(v)) <= 1e-6 * max(1.0, abs(float(v))) for k, v in metrics.items())
print("tensorboard", len(tags), same)
