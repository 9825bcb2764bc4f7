"""contract/reader.py: a tree of run folders -> one DataFrame of the files as written."""
from __future__ import annotations

import math

from contract import reader
from contract.runfolder import RunFolder
from contract.manifest import VERSION

EPOCH = dict(epoch=0, lr=0.1, train_loss=float("nan"), train_top1=50.0, train_top5=90.0, val_loss=1.0, val_top1=40.0,
             val_top5=80.0, epoch_time=1.0, images=8, steps=1, step=1, skipped_images=0, skipped_val_images=0, skipped_steps=0,
             data_share=0.1, data_s=0.1, compute_s=0.8, comm_s=0.0)


def test_a_row_per_folder_then_its_records_each_field_as_written(tmp_path):
    new = tmp_path / "04_x" / "new"
    run = RunFolder(new, writes=True, echo=False)
    run.write_config({"experiment": "04_x", "run": "new", "scale": "local"})
    run.progress(manifest_version=VERSION, status="completed", epochs_done=1, hosts=["h"])
    run.record("epoch", **EPOCH)
    run.close()
    old = tmp_path / "04_x" / "old"  # no config or manifest; an epoch record of two fields; a line that is none
    old.mkdir()
    (old / "metrics.jsonl").write_text('{"kind": "epoch", "epoch": 0, "val_top1": 5}\nnot json\n')

    df = reader.read_runs(tmp_path)
    assert df["kind"].tolist() == ["run", "epoch", "run", "epoch"]
    assert df["path"].tolist() == [str(new)] * 2 + [str(old)] * 2
    assert set(df["experiment"]) == {"04_x"} and df["run"].tolist() == ["new", "new", "old", "old"]
    assert set(reader.IDENTITY + reader.FOLDER + reader.RECORD) <= set(df.columns)
    folder_new, epoch_new, folder_old, epoch_old = (row for _, row in df.iterrows())
    assert folder_new["config"]["run"] == "new" and folder_new["manifest"]["hosts"] == ["h"]
    assert folder_new["fingerprint"] == reader.folder_fingerprint(new) and folder_new["problems"] == ()
    assert epoch_new["val_top1"] == 40.0 and epoch_new["lr"] == 0.1 and math.isnan(epoch_new["train_loss"])
    assert epoch_old["val_top1"] == 5 and epoch_old["train_loss"] is None  # not held: None, never NaN
    assert folder_old["config"] is None and folder_old["fingerprint"] is None and folder_old["bad_lines"] == 1
    assert df.attrs["problems"] == [f"{old}: config.json: missing", f"{old}: manifest.json: missing",
                                    f"{old}: metrics.jsonl: 1 bad line(s) skipped"]
    one = reader.read_run(old)
    assert one["kind"].tolist() == ["run", "epoch"] and one.attrs["problems"] == df.attrs["problems"]
    assert reader.read_runs(tmp_path / "nothing").empty
