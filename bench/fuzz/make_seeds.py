#!/usr/bin/env python3
"""Seed corpora for the libFuzzer targets, from small real traces (../shared/traces; never copied into the repo).

make_seeds.py TRACES_DIR OUT_DIR [STEPSCOPE_CLI]
  OUT_DIR/kineto_json/   the four smallest Kineto traces whole, and the first 60 events of every other one
  OUT_DIR/decompress/    the small traces as gzip (as published) and zstd, and one plain
  OUT_DIR/nsys_sqlite/   the nsys export with at most 8 rows per table, vacuumed
  OUT_DIR/store_reader/  stores imported from two small traces by STEPSCOPE_CLI (skipped without it)
"""
import gzip, json, os, shutil, sqlite3, subprocess, sys

traces, out = sys.argv[1], sys.argv[2]
cli = sys.argv[3] if len(sys.argv) > 3 else ""
SMALL = ["hta/legacy_categories_tiny.json.gz", "hta/triton_driver_launch.json.gz",
         "hta/cuda_event_sync.json.gz", "hta/cuda_event_sync_multi_stream.json.gz"]

def folder(name):
    d = os.path.join(out, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d

k, z, n, s = folder("kineto_json"), folder("decompress"), folder("nsys_sqlite"), folder("store_reader")
for root, _, files in os.walk(traces):
    for f in sorted(files):
        if not f.endswith(".json.gz"):
            continue
        rel = os.path.relpath(os.path.join(root, f), traces)
        name = rel.replace("/", "_")[:-3]
        data = gzip.open(os.path.join(root, f)).read()
        if rel in SMALL:
            open(os.path.join(k, name), "wb").write(data)
            open(os.path.join(z, name + ".gz"), "wb").write(open(os.path.join(root, f), "rb").read())
            if shutil.which("zstd"):
                subprocess.run(["zstd", "-q", "-f", "-3", "-", "-o", os.path.join(z, name + ".zst")], input=data, check=True)
            continue
        doc = json.loads(data)
        events = doc.get("traceEvents", doc) if isinstance(doc, dict) else doc
        meta = [e for e in events if isinstance(e, dict) and e.get("ph") == "M"][:20]
        rest = [e for e in events if not (isinstance(e, dict) and e.get("ph") == "M")][:60]
        small = dict(doc, traceEvents=meta + rest) if isinstance(doc, dict) else meta + rest
        open(os.path.join(k, name), "w").write(json.dumps(small))
open(os.path.join(z, "plain.json"), "wb").write(open(os.path.join(k, sorted(os.listdir(k))[0]), "rb").read()[:4096])

nsys = os.path.join(traces, "nsys/cloverleaf_a100.sqlite.gz")
if os.path.exists(nsys):
    path = os.path.join(n, "cloverleaf_a100_8rows.sqlite")
    open(path, "wb").write(gzip.open(nsys).read())
    db = sqlite3.connect(path)
    tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    for t in tables:
        try:
            db.execute(f'DELETE FROM "{t}" WHERE rowid NOT IN (SELECT rowid FROM "{t}" LIMIT 8)')
        except sqlite3.Error:
            pass  # WITHOUT ROWID tables: keep
    db.commit()
    db.execute("VACUUM")
    db.close()

if cli and os.access(cli, os.X_OK):
    for rel in SMALL[:2]:
        dst = os.path.join(s, os.path.basename(rel).split(".")[0] + ".db")
        subprocess.run([cli, "import", os.path.join(traces, rel), "-o", dst], check=True, stdout=subprocess.DEVNULL)
        db = sqlite3.connect(dst)
        db.execute("VACUUM")
        db.close()

for d in (k, z, n, s):
    files = os.listdir(d)
    print(f"{os.path.basename(d)}: {len(files)} seeds, {sum(os.path.getsize(os.path.join(d, f)) for f in files)} bytes")
