"""``mm2py audit``'s reads and report: a flow's source and target partitions read with the raw
client and compared by :mod:`mm2py.engine.audit`."""

from mm2py.operations.audit.driver import Progress
from mm2py.operations.audit.report import AuditReport, Verdict, table
from mm2py.operations.audit.run import audit_flow

__all__ = ["AuditReport", "Progress", "Verdict", "audit_flow", "table"]
