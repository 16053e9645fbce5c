"""QR (quotient-remainder) rows: ceil(rows / k) + k rows whose products (or sums) stand for the table's rows
(placer/specs/compression.py allows it per table, up to max_collisions; program/compressed_ops.py prices it,
runner/compressed.py runs it). Table-wise on one GPU with every row in HBM (storage.check_compressed)."""
from placer.errors import SpecError
from placer.forms.base import StorageForm
from placer.plan import Compression, QRForm


def allows(t) -> bool:
    """Whether table ``t``'s workload entry allows QR rows (compression.qr)."""
    return t.compression is not None and t.compression.qr is not None


def check(p, t, file, field) -> None:
    """SpecError for a QR placement its table does not allow: not allowed, more collisions than allowed or than
    half the rows, another combine."""
    c, allowed = p.compression.qr, t.compression.qr if allows(t) else None
    if allowed is None:
        raise SpecError(f"table {p.table!r} is stored QR-compressed, but its workload entry does not allow it "
                        "(compression.qr)", file=file, field=field)
    if c.collisions > allowed.max_collisions:
        raise SpecError(f"table {p.table!r}: QR collisions {c.collisions} exceed the workload's "
                        f"compression.qr.max_collisions {allowed.max_collisions}", file=file,
                        field=f"{field}.qr.collisions")
    if c.combine != allowed.combine:
        raise SpecError(f"table {p.table!r}: QR combine {c.combine!r} is not the workload's "
                        f"{allowed.combine!r}", file=file, field=f"{field}.qr.combine")
    if c.collisions > t.rows // 2:
        raise SpecError(f"table {p.table!r}: QR collisions {c.collisions} leave fewer than 2 quotient rows "
                        f"of its {t.rows} rows", file=file, field=f"{field}.qr.collisions")


QR_SMALL_COLLISIONS = (2, 4)  # QR collisions offered below the allowed maximum (the maximum is always offered)


def qr_collisions(t) -> list[int]:
    """The QR collisions k offered for a table: its allowed max_collisions, then QR_SMALL_COLLISIONS below it
    (none if the workload does not allow QR)."""
    if not allows(t):
        return []
    qr = t.compression.qr
    return [qr.max_collisions] + [k for k in QR_SMALL_COLLISIONS if k < qr.max_collisions]


def compressions(t, precision: str) -> list:
    """QR at each of ``qr_collisions``, with the workload's combine."""
    return [Compression.model_construct(qr=QRForm.model_construct(collisions=k, combine=t.compression.qr.combine),
                                        int8=False) for k in qr_collisions(t)]


FORM = StorageForm(name="qr", field="compression.qr", allows=allows, check=check, compressions=compressions,
                   torchrec_lacks="QR embedding table")
