"""int8 rows: a frozen table's rows in int8 with an fp32 scale and bias each (program/compressed_ops.py prices
it, runner/compressed.py runs it). Frozen tables only, table-wise on one GPU with every row in HBM
(storage.check_compressed)."""
from placer.errors import SpecError
from placer.forms.base import StorageForm
from placer.plan import Compression


def allows(t) -> bool:
    """Whether table ``t``'s workload entry allows int8 rows: compression.int8 on a frozen table."""
    return t.compression is not None and bool(t.compression.int8) and bool(t.frozen)


def check(p, t, file, field) -> None:
    """SpecError for an int8 placement of a table whose entry does not allow it."""
    if not allows(t):
        raise SpecError(f"table {p.table!r} is stored int8, but its workload entry does not allow it "
                        "(compression.int8 on a frozen table)", file=file, field=field)


def compressions(t, precision: str) -> list:
    """int8 rows, from the table's own precision only (a frozen fp32 table is not offered int8 of fp16 rows)."""
    return [Compression.model_construct(qr=None, int8=True)] if allows(t) and precision == t.dtype else []


FORM = StorageForm(name="int8", field="compression.int8", allows=allows, check=check, compressions=compressions,
                   torchrec_lacks="trainable int8 embedding table")
