"""A paginator that counts at most :data:`CAP` rows, for lists of tables with millions of rows.

Django's admin counts the filtered rows of every list page (``COUNT(*)``), which on a job table of
ten million rows takes seconds. Counting the first ``CAP + 1`` matches instead costs at most that
many index entries; beyond it the list says "more than 10,000" and offers the pages up to there
(filters and the search narrow the rest).
"""

from __future__ import annotations

from django.core.paginator import Paginator
from django.utils.functional import cached_property
from django.utils.translation import gettext

CAP = 10_000


class AtLeast(int):
    """A count known only to be more than :data:`CAP`: compares as ``CAP + 1``, reads as words."""

    def __str__(self) -> str:
        return gettext("more than %(cap)s") % {"cap": f"{CAP:,}"}


class CappedPaginator(Paginator):
    """Counts the rows of its queryset up to :data:`CAP` (see the module's docstring)."""

    @cached_property
    def count(self) -> int:
        # Without the list's ORDER BY: the count then stops at CAP + 1 rows instead of sorting them all.
        found = self.object_list.order_by()[:CAP + 1].count()
        return AtLeast(found) if found > CAP else found
