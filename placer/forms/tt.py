"""TT (tensor-train, TT-Rec) rows: three fp32 cores of the workload's inner ranks stand for the table's rows
(program/tt_shape.py names the shape; program/tt_ops.py prices it, runner/compressed.py runs it). Trained
tables only, fp32, table-wise on one GPU with every row in HBM (storage.check_compressed)."""
from placer.errors import SpecError
from placer.forms.base import StorageForm
from placer.plan import Compression, TTForm


def allows(t) -> bool:
    """Whether table ``t``'s workload entry allows TT rows (compression.tt)."""
    return t.compression is not None and t.compression.tt is not None


def check(p, t, file, field) -> None:
    """SpecError for a TT placement its table does not allow: not allowed, other ranks, a frozen table, fp16."""
    if not allows(t):
        raise SpecError(f"table {p.table!r} is stored TT-compressed, but its workload entry does not allow it "
                        "(compression.tt)", file=file, field=field)
    allowed = t.compression.tt
    if tuple(p.compression.tt.ranks) != tuple(allowed.ranks):
        raise SpecError(f"table {p.table!r}: TT ranks {list(p.compression.tt.ranks)} are not the workload's "
                        f"compression.tt.ranks {list(allowed.ranks)}", file=file, field=f"{field}.tt.ranks")
    if t.frozen or p.precision != "fp32":
        raise SpecError(f"table {p.table!r}: TT cores are fp32 and trained (a frozen table takes int8 rows, and "
                        f"fp16 cores are not run), got precision {p.precision}{' on a frozen table' * t.frozen}",
                        file=file, field=field)


def compressions(t, precision: str) -> list:
    """TT at the workload's ranks, for a trained table at fp32 (the cores are fp32)."""
    if not allows(t) or t.frozen or precision != "fp32":
        return []
    return [Compression.model_construct(qr=None, tt=TTForm.model_construct(ranks=tuple(t.compression.tt.ranks)),
                                        int8=False)]


FORM = StorageForm(name="tt", field="compression.tt", allows=allows, check=check, compressions=compressions,
                   torchrec_lacks="TT (tensor-train) embedding table")
