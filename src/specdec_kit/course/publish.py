"""Where students get the kit: the one place that names the course's public student repository.

`specdec-kit release` writes these into the student notebook's set-up cell and README; change them
here (and tag the student repository with KIT_TAG) before a release.
"""

STUDENT_REPO = "your-course/specdec-assignment"  # GitHub owner/name the student tree is published to
KIT_TAG = "v0.1.0"  # the tag students install the support package at


def install_spec() -> str:
    """What the set-up cell passes to pip."""
    return f"specdec-kit @ git+https://github.com/{STUDENT_REPO}@{KIT_TAG}"


def colab_url(notebook: str) -> str:
    return f"https://colab.research.google.com/github/{STUDENT_REPO}/blob/{KIT_TAG}/{notebook}"
