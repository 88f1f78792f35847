"""The course's grading machinery: checks, the autograde pipeline and the instructor commands.

Importing this package keeps ``rfc3987_syntax`` out of the process. ``jsonschema`` (imported by
``nbformat``) loads it, when installed, for its ``iri`` and ``iri-reference`` format checkers, and
it builds about 35 Lark parsers at import time: about 2 s of CPU on a slow core, in every process
that reads a notebook (each grading process, each command). No notebook or Jupyter schema uses
those formats (jsonschema issue #1428, opendatahub-io/notebooks issue #3532), so ``jsonschema``
simply goes without the two checkers in processes that import ``grader`` before it (the
commands, grading processes, and graded kernels, whose guard is ``grader.grading.guard``); a Jupyter
server or a student's own kernel that does not is not affected.
"""

import sys

sys.modules.setdefault("rfc3987_syntax", None)  # None: "import rfc3987_syntax" raises ImportError
