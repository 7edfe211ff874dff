"""A project that users have changed takes in later template changes through cruft."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import REPO

# Commits must work without the machine's git identity or settings (signing, hooks, templates).
GIT_ENV = {
    **os.environ,
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
}


# What the post-generation hook prints for a project just created, and for no other render.
NEXT_STEPS = "Created digit-classifier. Next:"


def git(cwd: Path, *args: str) -> str:
    result = subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout


def cruft(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "cruft", *args]
    return subprocess.run(command, cwd=cwd, env=GIT_ENV, capture_output=True, text=True)


def up_to_date(project: Path) -> bool:
    """`cruft check`'s verdict; any other outcome (an error) fails the test."""
    result = cruft(project, "check")
    verdicts = {"cruft is up to date": True, "cruft is out of date": False}
    found = [verdict for text, verdict in verdicts.items() if text in result.stdout]
    assert len(found) == 1 and result.returncode == (0 if found[0] else 1), result.stderr
    return found[0]


def commit_all(repo: Path, message: str) -> None:
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "--message", message)


def copy_template(destination: Path) -> None:
    """The template as it stands in this checkout, committed work or not, minus ignored files."""
    listed = git(REPO, "ls-files", "--cached", "--others", "--exclude-standard", "-z")
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():  # tracked files deleted in the working tree are listed too
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)


def test_cruft_update_merges_template_changes_into_a_changed_project(tmp_path):
    template, projects = tmp_path / "template", tmp_path / "projects"
    copy_template(template)
    git(template, "init", "--quiet")
    commit_all(template, "template v1")

    created = cruft(tmp_path, "create", str(template), "--no-input", "--output-dir", str(projects))
    assert created.returncode == 0, created.stderr
    assert created.stdout.count(NEXT_STEPS) == 1
    project = projects / "digit-classifier"
    readme = project / "README.md"
    git(project, "init", "--quiet")
    commit_all(project, "generated")
    title, rest = readme.read_text().split("\n", 1)
    readme.write_text(f"{title}\n\nOur notes: the model ships to the sorting machine.\n{rest}")
    commit_all(project, "user change")
    assert up_to_date(project)

    template_readme = template / "{{cookiecutter.project}}" / "README.md"
    template_readme.write_text(f"{template_readme.read_text()}\nA section from the template.\n")
    commit_all(template, "template v2")
    assert not up_to_date(project)

    updated = cruft(project, "update", "--skip-apply-ask")
    assert updated.returncode == 0, updated.stdout + updated.stderr
    assert NEXT_STEPS not in updated.stdout  # its renders are compared, then deleted
    text = readme.read_text()
    assert "Our notes: the model ships to the sorting machine." in text
    assert text.endswith("\nA section from the template.\n")
    # Hooks ran again for both renders and agreed: nothing else changed, no license folder.
    changed = {line[3:] for line in git(project, "status", "--porcelain").splitlines()}
    assert changed == {"README.md", ".cruft.json"}
    assert up_to_date(project)

    compared = cruft(project, "diff")
    assert compared.returncode == 0, compared.stderr
    assert "\n-Our notes: the model ships to the sorting machine.\n" in compared.stdout
    assert NEXT_STEPS not in compared.stdout


def test_cookiecutter_prints_the_next_steps_once(tmp_path):
    command = [sys.executable, "-m", "cookiecutter", "--no-input", str(REPO), "-o", str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(NEXT_STEPS) == 1
    assert "  cd digit-classifier\n" in result.stdout
