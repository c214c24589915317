/* Finds a write past the end of a heap block (how the vmapped-solve heap corruption of
 * iree_limits/scatter_out_of_bounds.mlir's @rows was found): every block the process
 * allocates gets PAD bytes of 0xA5 after it, checked when it is freed; the first block
 * found overwritten is reported (its allocation number, size and the bytes written) and
 * the process aborts. Electric Fence misses IREE's overruns: IREE allocates with
 * aligned_alloc, and a short overrun stays inside the 64-byte alignment.
 *
 *   gcc -O1 -shared -fPIC -o heap_canary.so iree_limits/heap_canary.c
 *   LD_PRELOAD=$PWD/heap_canary.so \
 *     .venv/lib/python3.X/site-packages/iree/_runtime_libs/iree-run-module ...
 *
 * (the binary itself: the `iree-run-module` on PATH is a Python launcher). To see which
 * dispatch writes there, compile with --iree-llvmcpu-link-embedded=false (dispatches as
 * a shared library, with symbols), set HEAP_CANARY_STOP to the reported allocation
 * number, and in gdb: `break heap_canary_stop`, `run`, `finish`,
 * `watch -l *(int *)heap_canary_watch`, `continue`, `bt`.
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PAD 4096
#define MAX_BLOCKS 200000

extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

static void *blocks[MAX_BLOCKS];
static size_t sizes[MAX_BLOCKS];
static int count;
static int stop = -2;  /* HEAP_CANARY_STOP, read at the first allocation */
volatile unsigned char *heap_canary_watch;  /* the first byte past the stopped block */

void heap_canary_stop(void) {}

static void *allocate(size_t alignment, size_t n) {
  if (stop == -2) {
    const char *env = getenv("HEAP_CANARY_STOP");
    stop = env ? atoi(env) : -1;
  }
  if (alignment < 16) alignment = 16;
  size_t total = (n + PAD + alignment - 1) / alignment * alignment;
  unsigned char *p = __libc_memalign(alignment, total);
  if (!p) return NULL;
  memset(p + n, 0xA5, total - n);
  if (count < MAX_BLOCKS) { blocks[count] = p; sizes[count] = n; }
  if (count == stop) { heap_canary_watch = p + n; heap_canary_stop(); }
  count++;
  return p;
}

static int find(void *p) {
  for (int i = (count < MAX_BLOCKS ? count : MAX_BLOCKS) - 1; i >= 0; i--)
    if (blocks[i] == p) return i;
  return -1;
}

static void check(int i) {
  unsigned char *p = blocks[i];
  for (size_t k = 0; k < PAD; k++) {
    if (p[sizes[i] + k] == 0xA5) continue;
    fprintf(stderr, "heap_canary: block #%d of %zu bytes overwritten from +%zu:", i, sizes[i], k);
    for (size_t j = k; j + 4 <= PAD && j < k + 64; j += 4)
      fprintf(stderr, " %08x", *(unsigned *)(p + sizes[i] + j));
    fprintf(stderr, "\n");
    abort();
  }
}

void *malloc(size_t n) { return allocate(16, n); }
void *aligned_alloc(size_t alignment, size_t n) { return allocate(alignment, n); }
void *memalign(size_t alignment, size_t n) { return allocate(alignment, n); }
int posix_memalign(void **out, size_t alignment, size_t n) {
  *out = allocate(alignment, n);
  return *out ? 0 : 12; /* ENOMEM */
}
void *calloc(size_t items, size_t size) {
  void *p = allocate(16, items * size);
  if (p) memset(p, 0, items * size);
  return p;
}
void free(void *p) {
  if (!p) return;
  int i = find(p);
  if (i >= 0) { check(i); blocks[i] = NULL; }
  __libc_free(p);
}
void *realloc(void *p, size_t n) {
  void *q = allocate(16, n);
  if (p && q) {
    int i = find(p);
    size_t old = i >= 0 ? sizes[i] : malloc_usable_size(p);
    memcpy(q, p, old < n ? old : n);
    free(p);
  }
  return q;
}
