/* kiln's workspace allocator: where generated code gets its heap temporaries.
 *
 * A kernel that needs scratch too big for the stack (Winograd's transformed tiles, a packed
 * operand) allocates it on entry and frees it on exit, every call. Through malloc, blocks of
 * a megabyte or more are mmap'ed and unmapped each time, and every call pays the page faults
 * of fresh pages: a 56x56 Winograd conv ran 6x slower than with the same memory kept. So
 * freed blocks stay in a small per-thread cache and the next request of a size they fit
 * takes one back; the pages stay mapped and warm. Per thread, so no locks: pool threads
 * allocate inside their own tasks, and a block goes back to the thread that freed it.
 *
 * Every block carries a 64-byte header holding its size, so kiln_workspace_free needs only
 * the pointer; the data after it stays 64-byte aligned.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#define KILN_WS_ALIGN 64
#define KILN_WS_SLOTS 8                          /* blocks kept per thread */
#define KILN_WS_MAX_KEPT ((uint64_t)256 << 20)   /* bytes kept per thread, at most */

typedef struct {
  void* blocks[KILN_WS_SLOTS]; /* data pointers (the header precedes each) */
  int count;
  uint64_t kept;
} kiln_ws_cache;

static pthread_key_t kiln_ws_key;
static pthread_once_t kiln_ws_once = PTHREAD_ONCE_INIT;

static uint64_t block_size(void* data) { return *(uint64_t*)((char*)data - KILN_WS_ALIGN); }

static void release(void* data) { free((char*)data - KILN_WS_ALIGN); }

static void drop_cache(void* p) { /* a thread exits: hand its blocks back to malloc */
  kiln_ws_cache* cache = p;
  for (int i = 0; i < cache->count; ++i) release(cache->blocks[i]);
  free(cache);
}

static void make_key(void) { pthread_key_create(&kiln_ws_key, drop_cache); }

static kiln_ws_cache* thread_cache(void) {
  pthread_once(&kiln_ws_once, make_key);
  kiln_ws_cache* cache = pthread_getspecific(kiln_ws_key);
  if (cache == NULL) {
    cache = calloc(1, sizeof(kiln_ws_cache));
    if (cache != NULL && pthread_setspecific(kiln_ws_key, cache) != 0) {
      free(cache);
      cache = NULL;
    }
  }
  return cache; /* NULL only when out of memory: then nothing is cached */
}

static void take(kiln_ws_cache* cache, int i) {
  cache->kept -= block_size(cache->blocks[i]);
  cache->blocks[i] = cache->blocks[--cache->count];
}

static void evict(kiln_ws_cache* cache, int i) {
  void* data = cache->blocks[i];
  take(cache, i);
  release(data);
}

static int smallest(const kiln_ws_cache* cache) {
  int best = 0;
  for (int i = 1; i < cache->count; ++i)
    if (block_size(cache->blocks[i]) < block_size(cache->blocks[best])) best = i;
  return best;
}

/* 64-byte aligned memory for `nbytes` (NULL when out of memory). A cached block is reused
 * when it fits and is at most twice the request (a small request must not pin a big block
 * that the next big request then misses). */
void* kiln_workspace_alloc(uint64_t nbytes) {
  kiln_ws_cache* cache = thread_cache();
  if (cache != NULL) {
    int best = -1;
    for (int i = 0; i < cache->count; ++i) {
      uint64_t size = block_size(cache->blocks[i]);
      if (size >= nbytes && size / 2 <= nbytes &&
          (best < 0 || size < block_size(cache->blocks[best])))
        best = i;
    }
    if (best >= 0) {
      void* data = cache->blocks[best];
      take(cache, best);
      return data;
    }
  }
  uint64_t size = (nbytes + KILN_WS_ALIGN - 1) & ~(uint64_t)(KILN_WS_ALIGN - 1);
  if (size < nbytes || size > UINT64_MAX - KILN_WS_ALIGN) return NULL;
  char* raw = aligned_alloc(KILN_WS_ALIGN, size + KILN_WS_ALIGN);
  if (raw == NULL) return NULL;
  *(uint64_t*)raw = size;
  return raw + KILN_WS_ALIGN;
}

/* Give back a block from kiln_workspace_alloc: it is kept for reuse unless the cache is full,
 * in which case the smallest block (this one or a kept one) goes back to malloc. */
void kiln_workspace_free(void* data) {
  if (data == NULL) return;
  kiln_ws_cache* cache = thread_cache();
  uint64_t size = block_size(data);
  if (cache == NULL || size > KILN_WS_MAX_KEPT) {
    release(data);
    return;
  }
  if (cache->count == KILN_WS_SLOTS) {
    int s = smallest(cache);
    if (block_size(cache->blocks[s]) >= size) {
      release(data);
      return;
    }
    evict(cache, s);
  }
  /* over the byte cap: drop kept blocks, smallest first */
  while (cache->count > 0 && cache->kept + size > KILN_WS_MAX_KEPT) evict(cache, smallest(cache));
  cache->blocks[cache->count++] = data;
  cache->kept += size;
}

/* Hand every block this thread keeps back to malloc (tests; a process trimming memory). */
void kiln_workspace_release_thread(void) {
  kiln_ws_cache* cache = thread_cache();
  if (cache == NULL) return;
  while (cache->count > 0) evict(cache, cache->count - 1);
}

/* Blocks and bytes this thread keeps (tests). */
int32_t kiln_workspace_kept_blocks(void) {
  kiln_ws_cache* cache = thread_cache();
  return cache == NULL ? 0 : cache->count;
}

uint64_t kiln_workspace_kept_bytes(void) {
  kiln_ws_cache* cache = thread_cache();
  return cache == NULL ? 0 : cache->kept;
}
