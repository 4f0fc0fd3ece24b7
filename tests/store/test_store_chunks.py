"""The chunk store: round trip, append-only, fingerprints, corruption, pickles, the frame."""

from __future__ import annotations

import json
import os
import zipfile

import numpy as np
import pytest

from speceq.engines.base import PAD_OUT, SampleBatch, batch_from_lists
from speceq.errors import StoreError
from speceq.store import ChunkKey, SampleStore, load_samples_frame, write_json_atomic
from speceq.store.atomic import is_temp_file, temp_path_for
from speceq.store.chunks import case_dir_name


def make_batch(seed: int, rows: int = 6, length: int = 5, prompts: int = 2) -> SampleBatch:
    rng = np.random.default_rng(seed)
    lists = [list(rng.integers(0, 250, size=int(rng.integers(1, length + 1)))) for _ in range(rows)]
    return batch_from_lists(lists, np.tile(np.arange(prompts), rows // prompts), length,
                            drafted_tokens=12, accepted_tokens=7, wall_time_s=0.25, info={"k": 3})


def key(role: str = "baseline", case: str = "c1", slice_index: int = 0, **identity) -> ChunkKey:
    ident = {"engine": {"name": "fake", "config": {"k": 3}}, "seed": 11, "n": 3, "slice": slice_index, **identity}
    return ChunkKey.build(role, case, slice_index, ident)


def assert_same_batch(a: SampleBatch, b: SampleBatch) -> None:
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_array_equal(a.lengths, b.lengths)
    np.testing.assert_array_equal(a.prompt_index, b.prompt_index)
    assert (a.drafted_tokens, a.accepted_tokens, a.verify_steps, a.wall_time_s) == (
        b.drafted_tokens, b.accepted_tokens, b.verify_steps, b.wall_time_s)
    assert a.info == b.info


def test_put_get_round_trip(tmp_path):
    store = SampleStore(tmp_path)
    k, batch = key(), make_batch(0)
    assert not store.has(k)
    path = store.put(k, batch, {"elapsed_s": 1.5})
    assert path.is_file() and path.suffix == ".npz"
    assert store.has(k)
    got = store.get(k)
    assert_same_batch(got, batch)
    assert got.tokens.dtype == np.int64
    assert store.get_meta(k) == {"elapsed_s": 1.5}
    assert store.keys() == [k]


def test_fingerprint_depends_on_every_identity_field_and_not_on_key_order():
    a = ChunkKey.build("baseline", "c", 0, {"x": 1, "y": {"a": 1, "b": [1, 2]}})
    b = ChunkKey.build("baseline", "c", 0, {"y": {"b": [1, 2], "a": 1}, "x": 1})
    assert a.fingerprint == b.fingerprint and a == b
    for changed in ({"x": 2, "y": {"a": 1, "b": [1, 2]}}, {"x": 1, "y": {"a": 1, "b": [2, 1]}},
                    {"x": 1, "y": {"a": 1.5, "b": [1, 2]}}, {"x": 1, "y": {"a": 1, "b": [1, 2]}, "z": None}):
        assert ChunkKey.build("baseline", "c", 0, changed).fingerprint != a.fingerprint


def test_different_config_for_same_chunk_is_detected_naming_case_engine_and_field(tmp_path):
    store = SampleStore(tmp_path)
    store.put(key(role="candidate", case="greet"), make_batch(0))
    other = ChunkKey.build("candidate", "greet", 0, {
        "engine": {"name": "fake", "config": {"k": 4}}, "seed": 11, "n": 3, "slice": 0})
    for call in (store.has, store.get, lambda k: store.put(k, make_batch(1))):
        with pytest.raises(StoreError) as e:
            call(other)
        msg = str(e.value)
        assert "candidate" in msg and "'greet'" in msg and "slice 0" in msg
        assert "engine.config.k: stored 3, now 4" in msg
        assert "never mixed" in msg


def test_mismatch_lists_added_and_removed_fields(tmp_path):
    store = SampleStore(tmp_path)
    store.put(key(extra=1), make_batch(0))
    with pytest.raises(StoreError, match=r"extra: stored 1, now absent.*seed: stored 11, now 12"):
        store.has(key(seed=12))


def test_put_is_append_only(tmp_path):
    store = SampleStore(tmp_path)
    store.put(key(), make_batch(0))
    with pytest.raises(StoreError, match="never overwritten"):
        store.put(key(), make_batch(1))
    assert_same_batch(store.get(key()), make_batch(0))


def test_get_missing_chunk_is_a_store_error(tmp_path):
    with pytest.raises(StoreError, match="holds no readable baseline samples of case 'c1'"):
        SampleStore(tmp_path).get(key())


def test_bad_key_fields_are_rejected():
    with pytest.raises(StoreError, match="role"):
        ChunkKey.build("draft", "c", 0, {})
    with pytest.raises(StoreError, match="slice index"):
        ChunkKey.build("baseline", "c", -1, {})
    with pytest.raises(StoreError, match="JSON"):
        ChunkKey.build("baseline", "c", 0, {"x": float("nan")})
    with pytest.raises(StoreError, match="JSON"):
        ChunkKey.build("baseline", "c", 0, {"x": object()})


def test_case_dirs_are_safe_and_distinct():
    names = {case_dir_name(c) for c in ("a/b", "a_b", "../x", "a b", "a" * 300, "")}
    assert len(names) == 6
    for n in names:
        assert "/" not in n and not n.startswith(".") and len(n) <= 51


@pytest.mark.parametrize("damage", ["truncate", "garbage", "flip", "empty", "bad-meta"])
def test_corrupt_chunk_is_dropped_by_the_writer_and_redone(tmp_path, damage, capsys):
    store = SampleStore(tmp_path)
    k = key()
    path = store.put(k, make_batch(0))
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(b"not a zip file at all" * 10)
    elif damage == "flip":  # flip one byte inside the tokens array's data
        with zipfile.ZipFile(path) as z:
            info = z.getinfo("tokens.npy")
        pos = info.header_offset + 30 + len(info.filename) + len(info.extra) + 200
        path.write_bytes(data[:pos] + bytes([data[pos] ^ 0xFF]) + data[pos + 1:])
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "bad-meta":
        with zipfile.ZipFile(path) as z:
            arrays = {n[:-4]: np.load(z.open(n)) for n in z.namelist() if n != "meta.npy"}
        np.savez(path, meta=np.array("{}"), **arrays)
    # a reader skips it and leaves the file alone
    reader = SampleStore(tmp_path)
    assert reader.keys() == [] and path.exists()
    # the writer deletes it, reports it missing (and says so), and can store it again
    store.acquire_writer_lock()
    try:
        assert not store.has(k)
        assert not path.exists()
        err = capsys.readouterr().err
        assert f"chunk file {path} is unreadable (" in err and "deleted, its samples are drawn again" in err
        assert [d["path"] for d in store.discarded] == [str(path)] and store.discarded[0]["reason"]
        store.put(k, make_batch(0))
        assert_same_batch(store.get(k), make_batch(0))
    finally:
        store.release_writer_lock()


def test_pickled_chunk_is_never_loaded(tmp_path):
    """A chunk holding an object array would need pickle: it is refused, not executed."""
    store = SampleStore(tmp_path)
    path = store.put(key(), make_batch(0))
    with zipfile.ZipFile(path) as z:
        meta = np.load(z.open("meta.npy"))
    evil = np.empty(1, dtype=object)
    evil[0] = {"payload": 1}
    np.savez(path, tokens=evil, lengths=np.ones(6, np.int64), prompt_index=np.zeros(6, np.int64), meta=meta)
    with pytest.raises(ValueError, match="allow_pickle"):
        np.load(path, allow_pickle=False)["tokens"]
    assert SampleStore(tmp_path).keys() == []
    with pytest.raises(StoreError, match="no readable"):
        SampleStore(tmp_path).get(key())


def test_writer_lock_is_exclusive_and_cleans_temp_files(tmp_path):
    store = SampleStore(tmp_path)
    path = store.put(key(), make_batch(0))
    leftover = temp_path_for(path)
    leftover.write_bytes(b"half a chunk")
    assert is_temp_file(leftover)
    assert store.keys() == [key()]  # readers never look at temp files
    store.acquire_writer_lock()
    try:
        assert not leftover.exists() and path.exists()
        with pytest.raises(StoreError, match="another process is writing"):
            SampleStore(tmp_path).acquire_writer_lock()
    finally:
        store.release_writer_lock()
    second = SampleStore(tmp_path)
    second.acquire_writer_lock()  # free again once released
    second.release_writer_lock()


def test_discard_all_removes_chunks_only(tmp_path):
    store = SampleStore(tmp_path)
    store.put(key(), make_batch(0))
    write_json_atomic(tmp_path / "provenance.json", {"a": 1})
    store.discard_all()
    assert store.keys() == [] and (tmp_path / "provenance.json").exists()


def test_discard_all_empties_a_symlinked_chunks_folder_and_keeps_the_link(tmp_path):
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    store = SampleStore(out)
    store.put(key(), make_batch(0))
    store.put(key("candidate"), make_batch(1))
    (out / "chunks").rename(elsewhere)
    (out / "chunks").symlink_to(elsewhere, target_is_directory=True)
    (elsewhere / "not-the-stores.txt").write_text("kept")  # the link's target may hold other things
    assert len(store.keys()) == 2  # read through the link
    assert store.discard_all() == 2
    assert store.keys() == [] and not list(elsewhere.rglob("*.npz"))
    assert (out / "chunks").is_symlink() and sorted(p.name for p in elsewhere.iterdir()) == ["not-the-stores.txt"]


def test_discard_all_that_cannot_delete_a_chunk_raises_naming_it(tmp_path, monkeypatch):
    store = SampleStore(tmp_path)
    path = store.put(key(), make_batch(0))
    real_unlink = os.unlink

    def refuse_chunks(p, *args, **kwargs):  # as a read-only folder or a busy network share would
        if str(p).endswith(".npz"):
            raise PermissionError(13, "Permission denied", str(p))
        return real_unlink(p, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", refuse_chunks)
    with pytest.raises(StoreError, match=r"cannot discard the stored samples in .*chunks \(1 chunk file\(s\) left: "
                                         r".*slice-00000\.npz: Permission denied"):
        store.discard_all()
    assert path.exists()


def test_discard_all_refuses_a_dangling_chunks_link_naming_it(tmp_path):
    (tmp_path / "chunks").symlink_to(tmp_path / "gone", target_is_directory=True)
    with pytest.raises(StoreError, match=r"chunks is a symbolic link to a missing folder"):
        SampleStore(tmp_path).discard_all()


def test_write_json_atomic_replaces_whole_file_and_leaves_no_temp(tmp_path):
    p = tmp_path / "sub" / "x.json"
    write_json_atomic(p, {"b": np.int64(2), "a": [1.5]})
    write_json_atomic(p, {"c": np.arange(3)})
    assert json.loads(p.read_text()) == {"c": [0, 1, 2]}
    assert os.listdir(p.parent) == ["x.json"]


def test_failed_write_leaves_no_temp_file(tmp_path):
    store = SampleStore(tmp_path)
    bad = SampleBatch(tokens=np.zeros((1, 2), np.int64), lengths=np.ones(1, np.int64),
                      prompt_index=np.zeros(1, np.int64), info={"x": object()})
    with pytest.raises(StoreError, match="JSON"):
        store.put(key(), bad)
    assert store.keys() == []
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_load_samples_frame_one_row_per_sample(tmp_path):
    store = SampleStore(tmp_path)
    b0, b1, c0 = make_batch(0), make_batch(1), make_batch(2)
    store.put(key(slice_index=1), b1)
    store.put(key(slice_index=0), b0)
    store.put(key(role="candidate"), c0)
    df = load_samples_frame(tmp_path)
    assert list(df.columns) == ["engine", "engine_name", "case", "slice", "seed", "row",
                                "prompt_index", "tokens", "length"]
    assert len(df) == 18
    assert list(df["engine"]) == ["baseline"] * 12 + ["candidate"] * 6
    assert list(df["slice"][:12]) == [0] * 6 + [1] * 6
    assert set(df["engine_name"]) == {"fake"} and set(df["seed"]) == {11}
    for i in range(6):
        assert df["tokens"][i] == b0.row_tokens(i)
        assert df["length"][6 + i] == int(b1.lengths[i]) == len(df["tokens"][6 + i])
        assert PAD_OUT not in df["tokens"][12 + i]
    assert list(df["prompt_index"][:6]) == [0, 1, 0, 1, 0, 1]


def test_load_samples_frame_of_empty_store(tmp_path):
    df = load_samples_frame(tmp_path / "nothing")
    assert len(df) == 0 and "tokens" in df.columns


def test_one_slice_at_two_sample_counts_is_two_files_and_never_collides(tmp_path):
    store = SampleStore(tmp_path)
    small = ChunkKey.build("baseline", "c1", 3, {"seed": 5, "n": 2}, samples=2)
    full = ChunkKey.build("baseline", "c1", 3, {"seed": 5, "n": 4}, samples=4)
    b_small, b_full = make_batch(1, rows=2), make_batch(2, rows=4)
    store.put(small, b_small)
    assert not store.has(full)  # a budget change is not a configuration change
    store.put(full, b_full)
    assert store.path_for(small).name == "slice-00003-n2.npz" and store.path_for(full).name == "slice-00003-n4.npz"
    assert_same_batch(store.get(small), b_small)
    assert_same_batch(store.get(full), b_full)
    assert sorted(k.samples for k in store.keys()) == [2, 4]
    with pytest.raises(StoreError, match="sample count must be None or an integer >= 1"):
        ChunkKey.build("baseline", "c1", 0, {}, samples=0)
