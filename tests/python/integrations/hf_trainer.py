"""A tiny BERT (built from a config: no download) trained by transformers.Trainer on CPU with StepscopeCallback.

The dataset sleeps in __getitem__ for the batches of optimizer steps [--slow-from, --slow-to): those steps wait
for input. Prints the trainer's own optimizer step count and, per step, the monotonic times at which the trainer
began it (callbacks before and after stepscope's), for the test to hold the recorded steps against.
"""
import time

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainerCallback, TrainingArguments

from slow_batches import SlowBatches, parse_args
from stepscope.integrations import StepscopeCallback

a = parse_args("hf-out")

torch.manual_seed(0)
torch.set_num_threads(1)
SEQ = 32


class Data(SlowBatches):
    def item(self, i, g):
        return {"input_ids": torch.randint(0, 100, (SEQ,), generator=g), "attention_mask": torch.ones(SEQ, dtype=torch.long),
                "labels": torch.tensor(i % 2)}


class Clock(TrainerCallback):
    """Prints when the trainer began each step, as seen before and after stepscope's callback (the mark lies
    between the two; they are microseconds apart except where a window opens or closes)."""

    def __init__(self, when):
        self.when = when

    def on_step_begin(self, args, state, control, **kw):
        print(f"step_begin_{self.when} {state.global_step} {time.monotonic_ns()}", flush=True)

    def on_step_end(self, args, state, control, **kw):  # global_step counts the step just done
        print(f"step_end_{self.when} {state.global_step} {time.monotonic_ns()}", flush=True)


config = BertConfig(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
                    max_position_embeddings=SEQ)
model = BertForSequenceClassification(config)
args = TrainingArguments(output_dir=a.out_dir, max_steps=a.max_steps, per_device_train_batch_size=a.batch,
                         gradient_accumulation_steps=a.accum, use_cpu=True, report_to=[], save_strategy="no",
                         logging_strategy="no", dataloader_num_workers=0, disable_tqdm=True, seed=0)
options = {"steps": a.steps} if a.steps else {"every": a.every, "length": a.length} if a.every else {}
callback = StepscopeCallback(output=a.output, **options)
callbacks = [Clock("before"), callback, Clock("after")]
if a.second_callback:  # a user who added it twice (a config and the code): it must stand aside, said
    callbacks.append(StepscopeCallback(output=a.output + ".second.db", **options))
trainer = Trainer(model=model, args=args, train_dataset=Data(a, a.max_steps * a.batch * a.accum * 2),
                  callbacks=callbacks)
trainer.train()
if a.train_twice:
    trainer.train()
print(f"optimizer_steps {trainer.state.global_step}", flush=True)
for analysis in callback.analyses:
    print(f"analysis {analysis.path} {len(analysis.steps)} {analysis.summary.step_source}", flush=True)
