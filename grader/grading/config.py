"""The course's nbgrader configuration, shared by every way of grading.

One :func:`course_config` serves the course's commands (``python -m grader ...``), nbgrader's own
command line and the JupyterLab formgrader (``grader/nbgrader_config.py`` loads it when
``JUPYTER_CONFIG_PATH`` includes ``grader/``), so all of them grade the same way: with
:class:`grader.grading.execute.CourseExecute`, whose test cells are judged in the grading process
(:mod:`grader.grading.judge`), where a CUDA check without a GPU scores 0 and says so.

Folders: sources in ``solutions/``, the committed student release in ``notebooks/``, and the
instructor's working folders under ``grader/work/`` (git-ignored): ``submitted/<student>/<assignment>/``,
``autograded/``, ``feedback/``, ``gradebook.db`` and the course-local ``exchange/`` through which
nbgrader's release/fetch/submit/collect commands pass assignments.
"""

from __future__ import annotations

import functools
import os
import sysconfig
import warnings
from pathlib import Path

from traitlets.config import Config

from grader.runtime import course

#: nbgrader's gradebook (``nbgrader/api.py``) builds submissions through relationships that
#: SQLAlchemy 2 warns about on every grading (``SAWarning: Object of type <SubmittedAssignment>
#: not in session, add operation along 'Student.submissions' will not proceed``), several
#: lines per submission that bury the progress bar and change nothing the course records. Only
#: these lines, issued from nbgrader's gradebook module, are dropped; other warnings show.
GRADEBOOK_WARNINGS = {
    "message": r"Object of type <\w+> not in session, add operation along",
    "module": r"nbgrader\.api",
}
warnings.filterwarnings("ignore", **GRADEBOOK_WARNINGS)

COURSE_ID = "gpu-parallel-pytorch"
#: Seconds a single cell may run under autograde before it is interrupted (scores 0).
CELL_TIMEOUT_S = 600


def autograde_preprocessors() -> list:
    """nbgrader's autograde preprocessors with :class:`grader.grading.execute.CourseExecute` in place of
    its ``Execute`` (same order as nbgrader's own list)."""
    from nbconvert.preprocessors import ClearMetadataPreprocessor
    from nbgrader.preprocessors import (
        AssignLatePenalties,
        CheckCellMetadata,
        IgnorePattern,
        LimitOutput,
        SaveAutoGrades,
    )

    from grader.grading.execute import CourseExecute

    return [
        CourseExecute,
        IgnorePattern,
        ClearMetadataPreprocessor,
        LimitOutput,
        SaveAutoGrades,
        AssignLatePenalties,
        CheckCellMetadata,
    ]


def course_config(work: Path | None = None, submitted: Path | None = None) -> Config:
    """The nbgrader configuration of the course.

    Args:
        work: Instructor working folder (default ``grader/work``) holding ``autograded/``,
            ``feedback/``, ``gradebook.db`` and ``exchange/``.
        submitted: Folder of submissions laid out ``<student>/<assignment>/<notebook>.ipynb``
            (default ``<work>/submitted``, where ``nbgrader collect`` puts them).

    Returns:
        A traitlets Config for ``NbGraderAPI`` and nbgrader's apps.
    """
    use_alembic_in_process()  # each new gradebook: no `alembic` process (alembic_head)
    work = Path(work or course.WORK).resolve()
    c = Config()
    c.CourseDirectory.course_id = COURSE_ID
    c.CourseDirectory.root = str(course.REPO)
    c.CourseDirectory.source_directory = "solutions"
    c.CourseDirectory.release_directory = "notebooks"
    c.CourseDirectory.submitted_directory = str(
        Path(submitted).resolve() if submitted else work / "submitted"
    )
    c.CourseDirectory.autograded_directory = str(work / "autograded")
    c.CourseDirectory.feedback_directory = str(work / "feedback")
    c.CourseDirectory.db_url = f"sqlite:///{work / 'gradebook.db'}"
    # A course-local exchange, so release/fetch/submit/collect work from a fresh clone without
    # a system-wide /srv/nbgrader/exchange (students and instructor share this machine's folder).
    c.Exchange.root = str(work / "exchange")
    c.Exchange.path_includes_course = True
    c.Execute.timeout = CELL_TIMEOUT_S
    c.Autograde.autograde_preprocessors = autograde_preprocessors()
    # A deleted test cell is put back from the gradebook (and scores what it scores), not skipped.
    c.OverwriteCells.add_missing_cells = True
    # Files a notebook writes next to itself when run (07's %%writefile ddp_script.py) are
    # outputs, not course files: never copied into a release or an autograded folder.
    c.CourseDirectory.ignore = [
        *(".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback"),  # nbgrader's defaults
        *course.WRITTEN_FILES,
    ]
    return c


@functools.cache
def alembic_head() -> str:
    """The revision nbgrader stamps a new gradebook with, read in this process.

    ``nbgrader.api.get_alembic_version`` runs ``alembic heads`` for every gradebook it creates
    (the class's and each assignment's template: a fresh Python of about 4 s on 2 cores each);
    this reads the same revision from nbgrader's own migration scripts with alembic's API
    (``ScriptDirectory.get_heads``), once per process. With other than exactly one head it
    asks the command, as nbgrader does.
    """
    from alembic.config import Config as AlembicConfig
    from alembic.script import ScriptDirectory
    from nbgrader import api

    with api._temp_alembic_ini("sqlite:////tmp/gradebook.db") as ini:
        heads = ScriptDirectory.from_config(AlembicConfig(ini)).get_heads()
    return heads[0] if len(heads) == 1 else (_NBGRADER_ALEMBIC_VERSION or api.get_alembic_version)()


_NBGRADER_ALEMBIC_VERSION = None  # nbgrader's own, kept by use_alembic_in_process


def use_alembic_in_process() -> None:
    """Make nbgrader stamp new gradebooks with :func:`alembic_head` (in this process)."""
    global _NBGRADER_ALEMBIC_VERSION
    from nbgrader import api

    if api.get_alembic_version is not alembic_head:
        _NBGRADER_ALEMBIC_VERSION = api.get_alembic_version
        api.get_alembic_version = alembic_head


def scripts_on_path() -> None:
    """Put this interpreter's scripts folder on PATH.

    nbgrader runs the ``alembic`` executable to create or upgrade a gradebook; when the
    course's virtual environment is used without being activated
    (``.venv/bin/python -m grader ...``) that folder is not on PATH otherwise.
    """
    scripts = sysconfig.get_path("scripts")
    if scripts and scripts not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = scripts + os.pathsep + os.environ.get("PATH", "")


def prepare_work_folders(config: Config) -> None:
    """Make what nbgrader needs before it opens the gradebook of ``config``.

    Creates the autograded, feedback and exchange folders (and so the working folder that
    holds ``gradebook.db``: sqlite cannot create a database in a missing folder, and the
    formgrader then lists nothing) and puts this interpreter's scripts on PATH for
    ``alembic``. Used by :func:`api_for` and by ``grader/nbgrader_config.py`` (JupyterLab's
    formgrader, nbgrader's command line).
    """
    scripts_on_path()
    for key in ("autograded_directory", "feedback_directory"):
        Path(config.CourseDirectory[key]).mkdir(parents=True, exist_ok=True)
    exchange = Path(config.Exchange.root)
    exchange.mkdir(parents=True, exist_ok=True)
    exchange.chmod(0o777 | 0o1000)  # as nbgrader's docs ask of an exchange: world-writable, sticky


def api_for(config: Config):
    """An ``NbGraderAPI`` bound to ``config`` (creating the working folders)."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    prepare_work_folders(config)
    return NbGraderAPI(CourseDirectory(config=config), config=config)
