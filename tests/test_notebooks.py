"""The notebooks run top to bottom at small sizes (``JAXMECH_NB_SMALL=1``) and are stored
without outputs."""

from pathlib import Path

import nbformat
import pytest

NB_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(NB_DIR.glob("*.ipynb"))


def test_notebooks_exist_and_have_no_outputs():
    assert [p.name for p in NOTEBOOKS] == [
        "01_quickstart.ipynb",
        "02_stewart.ipynb",
        "03_sysid.ipynb",
        "04_throughput.ipynb",
        "05_identify_measured.ipynb",
    ]
    for p in NOTEBOOKS:
        nb = nbformat.read(p, as_version=4)
        for c in nb.cells:
            if c.cell_type == "code":
                assert not c.outputs and c.execution_count is None, p.name


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, monkeypatch):
    from nbclient import NotebookClient

    monkeypatch.setenv("JAXMECH_NB_SMALL", "1")
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(NB_DIR)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
