"""The one writer (perfscope.results.io): regular files atomically, everything else written through, `-` is stdout."""

import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from perfscope.errors import UserError
from perfscope.results.io import check_writable, copy_file, write_gzip, write_text


def test_a_regular_file_is_replaced_atomically_and_keeps_its_mode(tmp_path):
    path = tmp_path / "report.md"
    path.write_text("old")
    path.chmod(0o640)
    write_text(path, "new")
    assert path.read_text() == "new"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"]  # no temp file left behind


def test_dash_is_standard_output(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_text("-", "# hello\n")
    assert capsys.readouterr().out == "# hello\n"
    assert not (tmp_path / "-").exists()


def test_a_symlink_to_a_device_is_written_through_and_left_in_place(tmp_path):
    link = tmp_path / "sink"
    link.symlink_to("/dev/null")
    write_text(link, "discarded")
    assert link.is_symlink() and os.readlink(link) == "/dev/null"
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_symlink_to_a_regular_file_replaces_the_target_and_keeps_the_link(tmp_path):
    target = tmp_path / "real.md"
    target.write_text("old")
    link = tmp_path / "link.md"
    link.symlink_to(target)
    write_text(link, "new")
    assert link.is_symlink() and target.read_text() == "new"


def test_a_fifo_is_written_through_not_replaced(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()))
    reader.start()
    write_text(fifo, "through the pipe")
    reader.join(timeout=10)
    assert received == ["through the pipe"]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def _stdout_link(tmp_path):
    """A link shaped like /dev/stdout (-> /proc/self/fd/1): a broken writer damages this one, not the machine's."""
    link = tmp_path / "stdout"
    link.symlink_to("/proc/self/fd/1")
    return link


def test_a_link_to_stdout_writes_to_the_process_stdout_and_stays_a_link(tmp_path):
    """The observed damage: renaming a temp file over /dev/stdout made the machine's link a regular file."""
    link = _stdout_link(tmp_path)
    code = f"from perfscope.results.io import write_text; write_text({str(link)!r}, 'to stdout\\n')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout == "to stdout\n"
    assert link.is_symlink() and os.readlink(link) == "/proc/self/fd/1"


def test_a_link_to_stdout_redirected_to_a_file_appends_after_earlier_output(tmp_path):
    link, out = _stdout_link(tmp_path), tmp_path / "out.txt"
    code = f"print('first', flush=True); from perfscope.results.io import write_text; write_text({str(link)!r}, 'second\\n')"
    with open(out, "w") as fh:
        subprocess.run([sys.executable, "-c", code], stdout=fh, check=True, timeout=60)
    assert out.read_text() == "first\nsecond\n"
    assert link.is_symlink()


def test_dev_stdout_is_recognized_as_a_stream_without_writing_to_it():
    from perfscope.results.io import _descriptor

    assert _descriptor(Path("/dev/stdout")) == 1 and _descriptor(Path("/dev/fd/2")) == 2


@pytest.mark.parametrize("bad, reason", [("", "empty"), ("{dir}", "folder"), ("{file}/x.md", "not a folder")])
def test_unwritable_paths_are_user_errors_naming_the_path(tmp_path, bad, reason):
    (tmp_path / "f").write_text("")
    path = bad.format(dir=tmp_path, file=tmp_path / "f")
    with pytest.raises(UserError, match=reason):
        check_writable(path)
    with pytest.raises(UserError, match=reason):
        write_text(path, "x")


def test_check_writable_accepts_new_files_in_new_folders(tmp_path):
    check_writable(tmp_path / "a" / "b" / "report.md")
    check_writable("-")
    check_writable("/dev/null")
    assert not (tmp_path / "a").exists()  # a check creates nothing


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_a_read_only_folder_is_refused_before_any_work(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    with pytest.raises(UserError, match="permission"):
        check_writable(folder / "report.md")


def test_a_gzip_stream_replaces_the_file_whole_or_not_at_all(tmp_path):
    import gzip

    path = tmp_path / "trace" / "rank0.json.gz"
    write_gzip(path, iter([b'{"a": ', b"1}"]))
    assert gzip.open(path).read() == b'{"a": 1}'
    with open(path, "rb") as fh:  # the gzip header names the file, not the temp file it was written as
        assert fh.read(64)[10:].split(b"\0")[0] == b"rank0.json"  # after the 10-byte fixed header

    def broken():
        yield b"{"
        raise RuntimeError("the exporter died")

    with pytest.raises(RuntimeError):
        write_gzip(path, broken())
    assert gzip.open(path).read() == b'{"a": 1}'  # the old file is intact
    assert [p.name for p in path.parent.iterdir()] == ["rank0.json.gz"]  # and no temp file is left


def test_copy_file_is_atomic_and_names_a_missing_source(tmp_path):
    (tmp_path / "src.gz").write_bytes(b"trace")
    copy_file(tmp_path / "src.gz", tmp_path / "out" / "rank0.json.gz")
    assert (tmp_path / "out" / "rank0.json.gz").read_bytes() == b"trace"
    with pytest.raises(UserError, match="cannot copy"):
        copy_file(tmp_path / "missing.gz", tmp_path / "out" / "rank1.json.gz")
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["rank0.json.gz"]
