package main

// C helpers kept out of the files with //export (cgo allows only declarations in their preambles).

/*
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define HUGE_PAGE (2UL << 20)

static void put_handle(void **p, uintptr_t v) { *p = (void *)v; }
static void put_u64(unsigned long long *p, unsigned long long v) { *p = v; }
// Blocks of 2 MiB and more are mapped 2 MiB-aligned with transparent huge pages where the kernel
// allows (madvise mode): first touching a 256 MiB buffer then costs 128 faults instead of 65536.
static void *alloc_zeroed(size_t n) {
	if (n < HUGE_PAGE) return calloc(1, n);
	size_t len = (n + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
	char *raw = mmap(NULL, len + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (raw == MAP_FAILED) return NULL;
	char *p = (char *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1));
	if (p > raw) munmap(raw, p - raw);
	if (p + len < raw + len + HUGE_PAGE) munmap(p + len, raw + len + HUGE_PAGE - (p + len));
	madvise(p, len, MADV_HUGEPAGE);
	return p;
}
static void free_block(void *p, size_t n) {
	if (n < HUGE_PAGE) { free(p); return; }
	munmap(p, (n + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1));
}
static void copy_bytes(void *dst, const void *src, size_t n) { memmove(dst, src, n); }
*/
import "C"

import "unsafe"

// Device and pinned host memory live outside Go's heap (calloc, or mmap for large blocks: fresh zero
// pages, touched lazily, handed back at once on free), so Go's collector neither scans nor moves it.
func cAlloc(n uint64) unsafe.Pointer { return C.alloc_zeroed(C.size_t(n)) }

func cFree(p unsafe.Pointer, n uint64) { C.free_block(p, C.size_t(n)) }

func cCopy(dst, src unsafe.Pointer, n uint64) { C.copy_bytes(dst, src, C.size_t(n)) }

// putHandle writes an opaque handle (a small number, never a Go pointer) into a CUxxx* out-parameter.
func putHandle(p unsafe.Pointer, h uintptr) { C.put_handle((*unsafe.Pointer)(p), C.uintptr_t(h)) }

func putU64(p unsafe.Pointer, v uint64) {
	C.put_u64((*C.ulonglong)(p), C.ulonglong(v))
}
