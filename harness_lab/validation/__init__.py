"""Validators: the report contract (structural), acceptance receipts, optional semantic review."""

from .claims import Mismatch, check_claim
from .receipt import Receipt, sha256_hex
from .report import MAX_REPORT_BYTES, CheckFailure, ReportVerdict, check_report, find_citations
from .semantic import ClaimFinding, EvidenceSupportReviewer, SemanticReviewer, SemanticVerdict

__all__ = ["MAX_REPORT_BYTES", "CheckFailure", "Receipt", "ReportVerdict", "check_report", "find_citations", "sha256_hex",
           "ClaimFinding", "EvidenceSupportReviewer", "Mismatch", "SemanticReviewer", "SemanticVerdict", "check_claim"]
