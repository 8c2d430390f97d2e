"""Go's `sort.Slice` (Go 1.19 and later: pattern-defeating quicksort), reproduced step for step.

kube-scheduler sorts preemption victims with `sort.Slice` and MoreImportantPod, which is not a strict
weak order: between two pods of one priority that no kubelet started it holds both ways. The order
such pods come out in is then whatever the algorithm's exact sequence of comparisons and swaps leaves,
and that order decides which victims are reprieved. So this module performs the same comparisons and
swaps as Go 1.19's `pdqsort_func` (sort/zsortfunc.go): insertion sort up to 12 elements, pivots by
median of three (Tukey's ninther from 50), partial insertion sort on likely sorted input, equal-element
partitioning, pattern breaking with Go's xorshift, heapsort after too many bad pivots. It is checked
against Go's own output in tests/unit/scheduler/test_gosort.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

INSERTION_MAX = 12  # pdqsort insertion-sorts ranges up to this length
NINTHER_MIN = 50  # from this length the pivot is Tukey's ninther
PARTIAL_STEPS = 5  # out-of-order pairs partial insertion sort shifts before it gives up
PARTIAL_MIN = 50  # shorter ranges are not shifted by partial insertion sort
MASK64 = (1 << 64) - 1
UNKNOWN, INCREASING, DECREASING = 0, 1, 2


def sort_slice(items: list[T], less: Callable[[T, T], bool]) -> None:
    """Sort `items` in place as Go's `sort.Slice(items, less)` does."""
    _Sorter(items, less).pdqsort(0, len(items), len(items).bit_length())


class _Sorter(Generic[T]):
    def __init__(self, items: list[T], less: Callable[[T, T], bool]) -> None:
        self.items = items
        self.cmp = less

    def less(self, i: int, j: int) -> bool:
        return self.cmp(self.items[i], self.items[j])

    def swap(self, i: int, j: int) -> None:
        items = self.items
        items[i], items[j] = items[j], items[i]

    def insertion_sort(self, a: int, b: int) -> None:
        for i in range(a + 1, b):
            j = i
            while j > a and self.less(j, j - 1):
                self.swap(j, j - 1)
                j -= 1

    def pdqsort(self, a: int, b: int, limit: int) -> None:
        balanced = partitioned = True
        while True:
            length = b - a
            if length <= INSERTION_MAX:
                self.insertion_sort(a, b)
                return
            if limit == 0:
                self.heap_sort(a, b)
                return
            if not balanced:
                self.break_patterns(a, b)
                limit -= 1
            pivot, hint = self.choose_pivot(a, b)
            if hint == DECREASING:
                self.reverse(a, b)
                pivot = (b - 1) - (pivot - a)  # the same element, now counted from the end
                hint = INCREASING
            if balanced and partitioned and hint == INCREASING and self.partial_insertion_sort(a, b):
                return
            # the element before the range (an earlier pivot) not less than this pivot: many equal
            # elements; put those equal to the pivot first and go on with the rest
            if a > 0 and not self.less(a - 1, pivot):
                a = self.partition_equal(a, b, pivot)
                continue
            mid, partitioned = self.partition(a, b, pivot)
            left, right = mid - a, b - mid
            if left < right:
                balanced = left >= length // 8
                self.pdqsort(a, mid, limit)
                a = mid + 1
            else:
                balanced = right >= length // 8
                self.pdqsort(mid + 1, b, limit)
                b = mid

    def partition(self, a: int, b: int, pivot: int) -> tuple[int, bool]:
        """Elements less than the pivot before it, the others after; (its new index, whether the range
        was partitioned already)."""
        self.swap(a, pivot)
        i, j = a + 1, b - 1
        while i <= j and self.less(i, a):
            i += 1
        while i <= j and not self.less(j, a):
            j -= 1
        if i > j:
            self.swap(j, a)
            return j, True
        self.swap(i, j)
        i, j = i + 1, j - 1
        while True:
            while i <= j and self.less(i, a):
                i += 1
            while i <= j and not self.less(j, a):
                j -= 1
            if i > j:
                break
            self.swap(i, j)
            i, j = i + 1, j - 1
        self.swap(j, a)
        return j, False

    def partition_equal(self, a: int, b: int, pivot: int) -> int:
        """Elements not greater than the pivot first; returns where the greater ones start."""
        self.swap(a, pivot)
        i, j = a + 1, b - 1
        while True:
            while i <= j and not self.less(a, i):
                i += 1
            while i <= j and self.less(a, j):
                j -= 1
            if i > j:
                return i
            self.swap(i, j)
            i, j = i + 1, j - 1

    def partial_insertion_sort(self, a: int, b: int) -> bool:
        """Shift a few out-of-order neighbours into place; True when the range ends up sorted."""
        i = a + 1
        for _ in range(PARTIAL_STEPS):
            while i < b and not self.less(i, i - 1):
                i += 1
            if i == b:
                return True
            if b - a < PARTIAL_MIN:
                return False
            self.swap(i, i - 1)
            if i - a >= 2:  # the smaller one leftwards (down to index 1, as Go does)
                j = i - 1
                while j >= 1 and self.less(j, j - 1):
                    self.swap(j, j - 1)
                    j -= 1
            if b - i >= 2:  # the greater one rightwards
                j = i + 1
                while j < b and self.less(j, j - 1):
                    self.swap(j, j - 1)
                    j += 1
        return False

    def break_patterns(self, a: int, b: int) -> None:
        """Swap three elements around the middle with pseudo-random others (Go's xorshift)."""
        length = b - a
        if length < 8:
            return
        state = length
        modulus = 1 << length.bit_length()
        middle = a + (length // 4) * 2
        for idx in range(middle - 1, middle + 2):
            state ^= (state << 13) & MASK64
            state ^= state >> 17
            state ^= (state << 5) & MASK64
            other = state & (modulus - 1)
            if other >= length:
                other -= length
            self.swap(idx, a + other)

    def choose_pivot(self, a: int, b: int) -> tuple[int, int]:
        """(pivot index, how the samples were ordered: INCREASING, DECREASING or UNKNOWN)."""
        length = b - a
        quarter = length // 4
        i, j, k = a + quarter, a + quarter * 2, a + quarter * 3
        swaps = [0]
        if length >= 8:
            if length >= NINTHER_MIN:
                i = self.median(i - 1, i, i + 1, swaps)
                j = self.median(j - 1, j, j + 1, swaps)
                k = self.median(k - 1, k, k + 1, swaps)
            j = self.median(i, j, k, swaps)
        if swaps[0] == 0:
            return j, INCREASING
        if swaps[0] == 12:  # every comparison of the samples found them reversed
            return j, DECREASING
        return j, UNKNOWN

    def median(self, a: int, b: int, c: int, swaps: list[int]) -> int:
        a, b = self.order2(a, b, swaps)
        b, c = self.order2(b, c, swaps)
        a, b = self.order2(a, b, swaps)
        return b

    def order2(self, a: int, b: int, swaps: list[int]) -> tuple[int, int]:
        if self.less(b, a):
            swaps[0] += 1
            return b, a
        return a, b

    def reverse(self, a: int, b: int) -> None:
        i, j = a, b - 1
        while i < j:
            self.swap(i, j)
            i, j = i + 1, j - 1

    def heap_sort(self, a: int, b: int) -> None:
        size = b - a
        for root in range((size - 1) // 2, -1, -1):
            self.sift_down(root, size, a)
        for end in range(size - 1, -1, -1):
            self.swap(a, a + end)
            self.sift_down(0, end, a)

    def sift_down(self, root: int, hi: int, first: int) -> None:
        while True:
            child = 2 * root + 1
            if child >= hi:
                return
            if child + 1 < hi and self.less(first + child, first + child + 1):
                child += 1
            if not self.less(first + root, first + child):
                return
            self.swap(first + root, first + child)
            root = child
