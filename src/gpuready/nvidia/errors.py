"""The one error the NVIDIA tool-output parsers raise.

A parser that meets output it cannot read fully (truncated by a dropped SSH session, garbled, or from a
driver that renamed a field) must say so instead of returning a record with holes: the conformance suite
would otherwise report "0 ECC errors" for a GPU it never really read. Subclassing ValueError keeps
``except ValueError`` callers working.
"""

from __future__ import annotations


class ParseError(ValueError):
    """Tool output could not be read completely; the message names the tool and what was missing."""
