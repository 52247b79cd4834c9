"""A small LightningModule trained by a Lightning Trainer on CPU with StepscopeLightningCallback (the same test as
hf_trainer.py: slow batches for optimizer steps [--slow-from, --slow-to), the trainer's own step starts printed as
seen before and after stepscope's callback)."""
import time

import torch
import lightning.pytorch as L

from slow_batches import SlowBatches, parse_args
from stepscope.integrations import StepscopeLightningCallback

a = parse_args("lightning-out")

torch.manual_seed(0)
torch.set_num_threads(1)
WIDTH = 256


class Data(SlowBatches):
    def item(self, i, g):
        return torch.randn(WIDTH, generator=g), torch.randn(WIDTH, generator=g)


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH) for _ in range(4)])

    def training_step(self, batch, batch_idx):
        x, y = batch
        for _ in range(4):  # a few ms of compute per batch
            x = self.net(x)
        return torch.nn.functional.mse_loss(x, y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-3)

    def on_train_batch_start(self, batch, batch_idx):  # after the callbacks' hooks
        if batch_idx % a.accum == 0:
            print(f"step_begin_after {self.trainer.global_step} {time.monotonic_ns()}", flush=True)

    def on_train_batch_end(self, outputs, batch, batch_idx):
        if batch_idx % a.accum == a.accum - 1:  # global_step counts the step just done
            print(f"step_end_after {self.trainer.global_step} {time.monotonic_ns()}", flush=True)


class Clock(L.Callback):  # before stepscope's in the callbacks list
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if batch_idx % a.accum == 0:
            print(f"step_begin_before {trainer.global_step} {time.monotonic_ns()}", flush=True)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if batch_idx % a.accum == a.accum - 1:
            print(f"step_end_before {trainer.global_step} {time.monotonic_ns()}", flush=True)


options = {"steps": a.steps} if a.steps else {"every": a.every, "length": a.length} if a.every else {}
callback = StepscopeLightningCallback(output=a.output, **options)
loader = torch.utils.data.DataLoader(Data(a, a.max_steps * a.batch * a.accum * 2), batch_size=a.batch, num_workers=0)
trainer = L.Trainer(max_steps=a.max_steps, accumulate_grad_batches=a.accum, accelerator="cpu", devices=1, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                    default_root_dir=a.out_dir, callbacks=[Clock(), callback])
trainer.fit(Model(), loader)
print(f"optimizer_steps {trainer.global_step}", flush=True)
for analysis in callback.analyses:
    print(f"analysis {analysis.path} {len(analysis.steps)} {analysis.summary.step_source}", flush=True)
