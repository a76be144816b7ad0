"""What make grade takes from a submissions folder (tutorial.intake, autograde.submissions): every
malformed file, link and folder name gets a one-line reason naming it, never an exception, and
nothing outside the student's folder is read or changed."""

import hashlib
import json
import os
from pathlib import Path

import nbformat
import pytest

from bildlib.notebook.tutorial import autograde, intake

NOT_NOTEBOOKS = {
    "a list": ("[]", "holds a JSON list, not a notebook"),
    "a string": ('"x"', "holds a JSON str"),
    "nbformat 3 with worksheets 5": ('{"nbformat": 3, "nbformat_minor": 0, "worksheets": 5}', ""),
    "a minor of 1e400": ('{"nbformat": 4, "nbformat_minor": 1e400, "cells": [], "metadata": {}}',
                         "has nbformat 4.inf"),
    "cells null": ('{"nbformat": 4, "nbformat_minor": 5, "cells": null, "metadata": {}}', ""),
    "cells [5]": ('{"nbformat": 4, "nbformat_minor": 5, "cells": [5], "metadata": {}}', ""),
    "nbformat [4]": ('{"nbformat": [4], "nbformat_minor": 5, "cells": []}', "has nbformat [4].5"),
    "cut off": ('{"cells": [', "is not notebook JSON: JSONDecodeError"),
    "nested 100,000 deep": ('{"cells": ' + "[" * 100_000 + "]" * 100_000 + "}", "is not notebook JSON"),
    "not UTF-8": (b"\xff\xfe{}", "UnicodeDecodeError"),
    "no nbformat": ('{"cells": [], "metadata": {}}', "has nbformat None.None"),
}  # fmt: skip


@pytest.mark.parametrize("case", NOT_NOTEBOOKS)
def test_a_file_that_is_not_a_notebook_gets_one_line(case, tmp_path):
    text, said = NOT_NOTEBOOKS[case]
    f = tmp_path / "tutorial.ipynb"
    f.write_bytes(text if isinstance(text, bytes) else text.encode())
    why = intake.notebook(f)
    assert why and "\n" not in why and len(why) <= 200 and why.startswith("tutorial.ipynb"), why
    assert said in why, why


def test_a_real_notebook_is_taken(tmp_path):
    f = tmp_path / "tutorial.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")]), f)
    assert intake.notebook(f) == ""


def _hashes(folder: Path) -> dict:
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()}


def test_links_fifos_and_large_files_are_refused_without_being_read(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "passwd"
    secret.write_text("root:x:0:0:the grader's secret\n")
    nbformat.write(nbformat.v4.new_notebook(), outside / "bob.ipynb")  # another student's
    before = _hashes(outside)
    d = tmp_path / "a"
    d.mkdir()
    for name, target in (("to-passwd.ipynb", secret), ("to-bob.ipynb", outside / "bob.ipynb")):
        (d / name).symlink_to(target)
        why = intake.notebook(d / name)
        assert why == f"{name} is a symbolic link: hand in the notebook file itself", why
    os.mkfifo(d / "fifo.ipynb")
    assert "is a FIFO" in intake.notebook(d / "fifo.ipynb")  # returns: a FIFO is never opened
    os.link(outside / "bob.ipynb", d / "hard.ipynb")
    assert "2 hard links" in intake.notebook(d / "hard.ipynb")
    with open(d / "big.ipynb", "wb") as f:
        f.truncate(intake.MAX_BYTES + 1)
    assert "over the limit" in intake.notebook(d / "big.ipynb")
    assert _hashes(outside) == before


def test_clear_removes_what_is_not_a_regular_file(tmp_path):
    outside = tmp_path / "gradebook.db"
    outside.write_text("grades")
    d = tmp_path / "autograded"
    (d / "sub").mkdir(parents=True)
    (d / "tutorial.ipynb").write_text("{}")
    (d / "sub" / "ok.txt").write_text("x")
    (d / "loot-gradebook.db").symlink_to(outside)
    (d / "dir-link").symlink_to(tmp_path)  # a link to a folder: removed, not walked into
    os.mkfifo(d / "sub" / "fifo")
    os.link(d / "sub" / "ok.txt", d / "hard.txt")
    removed = intake.clear(d)
    assert sorted(removed) == ["dir-link (a symbolic link)", "hard.txt (a file with 2 hard links)",
                               "loot-gradebook.db (a symbolic link)", "sub/fifo (a FIFO)"]  # fmt: skip
    # the other name of hard.txt's file has one link left: a file of the folder's own
    assert sorted(str(p.relative_to(d)) for p in d.rglob("*")) == ["sub", "sub/ok.txt", "tutorial.ipynb"]
    assert outside.read_text() == "grades"


def test_every_student_folder_gets_its_row_or_its_reason(tmp_path):
    s = tmp_path / "subs"
    names = ["alice", "...dots", "-rf", "a\nb", "x..y", "two", "none", "link"]
    for n in names[:-1]:
        (s / n).mkdir(parents=True)
    for n in ("alice", "...dots", "-rf", "a\nb", "x..y"):
        (s / n / "tutorial.ipynb").write_text("{}")
    (s / "two" / "tutorial").mkdir()
    for f in ("tutorial.ipynb", "tutorial/tutorial.ipynb"):  # both layouts at once: which one counts?
        (s / "two" / f).write_text("{}")
    (s / "link").symlink_to(s / "alice")  # a second row for alice's notebook
    (s / "README.txt").write_text("not a student")
    got = autograde.submissions(s)
    assert set(got) == set(names) and got["alice"] == s / "alice"  # its folder: the intake copies its files
    assert got["...dots"] == "the folder name '...dots' starts with a dot or a dash: rename it"
    assert got["-rf"] == "the folder name '-rf' starts with a dot or a dash: rename it"
    assert got["a\nb"] == "the folder name 'a\\nb' holds a space, a newline or a control character: rename it"
    assert got["x..y"] == "the folder name 'x..y' holds '..': rename it"
    assert got["two"] == ("expected one notebook, found 2: two/tutorial.ipynb, two/tutorial/tutorial.ipynb "
                          "(one student, one notebook)")  # fmt: skip
    assert got["none"] == "expected one notebook, found 0 (one student, one notebook)"
    assert got["link"] == "link is a symbolic link, not a student's folder"
    assert all(  # a reason, or the student's own folder
        str(v).startswith(("the folder name", "expected one", "link is", str(s)))
        for v in got.values()
    )
    assert all("\n" not in v for v in got.values() if isinstance(v, str))
    with pytest.raises(FileNotFoundError, match="SUBMISSIONS=.*no such folder"):
        autograde.submissions(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no student folders"):
        autograde.submissions(tmp_path / "empty")
    json.dumps({k: str(v) for k, v in got.items()})  # grading.json takes every name


GLOBS = ["s?*", "a*", "[ab]", "x{1,2}", "a;b", "a$b", "a/b", "`id`", "a|b", "a'b", "a\\b"]


@pytest.mark.parametrize("name", GLOBS)
def test_a_student_id_that_a_glob_or_a_shell_would_read_is_refused(name):
    why = intake.student_name(name)
    assert "which a glob, nbgrader or a shell reads as more than a letter" in why, (name, why)


@pytest.mark.parametrize("name", ["alice", "s1-solved", "jörg", "a.b@uni.edu", "x_y+z", "李"])
def test_a_plain_name_is_taken(name):
    assert intake.student_name(name) == ""


def test_a_link_at_any_depth_refuses_the_folder_and_a_copy_reads_only_regular_files(tmp_path):
    """A tutorial/ that is a link (to a classmate, to the solutions), a link or FIFO deeper down:
    the folder is refused, naming the path; a folder of regular files is copied byte for byte
    into a fresh one, and nothing outside it is read."""
    s = tmp_path / "subs"
    (s / "bob" / "tutorial").mkdir(parents=True)
    (s / "bob" / "tutorial" / "tutorial.ipynb").write_text("{}")
    (s / "bob" / "tutorial" / "data").mkdir()
    (s / "bob" / "tutorial" / "data" / "x.txt").write_text("x")
    (s / "eve").mkdir()
    (s / "eve" / "tutorial").symlink_to(s / "bob" / "tutorial")
    (s / "mal" / "tutorial" / "deep").mkdir(parents=True)
    (s / "mal" / "tutorial" / "tutorial.ipynb").write_text("{}")
    os.mkfifo(s / "mal" / "tutorial" / "deep" / "fifo")
    got = autograde.submissions(s)
    assert got["bob"] == s / "bob" / "tutorial"
    assert got["eve"] == "eve/tutorial is a symbolic link: hand in regular files only"
    assert got["mal"] == "mal/tutorial/deep/fifo is a FIFO: hand in regular files only"
    files, why = intake.tree(got["bob"])
    assert why == "" and sorted(map(str, files)) == ["data/x.txt", "tutorial.ipynb"]
    assert intake.copy(got["bob"], files, tmp_path / "fresh") == ""
    assert (tmp_path / "fresh" / "data" / "x.txt").read_text() == "x"
    (s / "bob" / "tutorial" / "data" / "x.txt").unlink()  # replaced by a link since the walk
    (s / "bob" / "tutorial" / "data" / "x.txt").symlink_to(tmp_path / "fresh" / "tutorial.ipynb")
    assert "x.txt cannot be read" in intake.copy(got["bob"], files, tmp_path / "again")
