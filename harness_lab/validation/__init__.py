"""Validators: the report contract (structural), the functional layer (check commands in the sandbox),
acceptance receipts, optional semantic review. The verdict and receipt types are records
(:mod:`harness_lab.records.verdicts`, :mod:`harness_lab.records.receipt`), re-exported here."""

from ..records.receipt import Receipt, sha256_hex
from ..records.verdicts import Verdict
from .claims import Mismatch, check_claim
from .functional import CheckRun, CheckSandbox, LayerFailure, LayerVerdict, run_functional_layer
from .report import MAX_REPORT_BYTES, CheckFailure, ReportVerdict, check_report, find_citations
from .semantic import ClaimFinding, EvidenceSupportReviewer, SemanticReviewer, SemanticVerdict

__all__ = ["MAX_REPORT_BYTES", "CheckFailure", "CheckRun", "CheckSandbox", "ClaimFinding", "EvidenceSupportReviewer",
           "LayerFailure", "LayerVerdict", "Mismatch", "Receipt", "ReportVerdict", "SemanticReviewer", "SemanticVerdict",
           "Verdict", "check_claim", "check_report", "find_citations", "run_functional_layer", "sha256_hex"]
