/* Time `number` back-to-back calls of a compiled kiln function without Python in the loop,
 * so that measurements of small kernels are not dominated by interpreter overhead. */
#include <stdint.h>
#include <time.h>

typedef int32_t (*kiln_function)(void* args, int32_t num_args);

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int32_t kiln_time_calls(kiln_function fn, void* args, int32_t num_args, int64_t number,
                        double* seconds) {
  int32_t status = 0;
  double start = now();
  for (int64_t i = 0; i < number && status == 0; ++i) status = fn(args, num_args);
  *seconds = now() - start;
  return status;
}

/* 1 when kiln_time_calls_flushed can evict memory from the caches on this CPU. */
int32_t kiln_can_flush(void) {
#if defined(__x86_64__) || defined(__i386__) || defined(__aarch64__)
  return 1;
#else
  return 0;
#endif
}

/* Like kiln_time_calls, but before each call every line of the `num_buffers` memory ranges
 * (`addresses`, `sizes` in bytes) is evicted from all cache levels, and only the calls are
 * timed. A kernel inside a model reads weights that other layers pushed out of the cache;
 * timed back to back, it would find them cached and measure a regime the model never sees. */
int32_t kiln_time_calls_flushed(kiln_function fn, void* args, int32_t num_args,
                                int64_t number, char* const* addresses, const int64_t* sizes,
                                int32_t num_buffers, double* seconds) {
  int32_t status = 0;
  double total = 0.0;
  for (int64_t i = 0; i < number && status == 0; ++i) {
#if defined(__x86_64__) || defined(__i386__)
    for (int32_t b = 0; b < num_buffers; ++b) {
      char* line = (char*)((uintptr_t)addresses[b] & ~(uintptr_t)63);
      for (; line < addresses[b] + sizes[b]; line += 64) __builtin_ia32_clflush(line);
    }
    __builtin_ia32_mfence();
#elif defined(__aarch64__)
    /* DC CIVAC: clean and invalidate by address to the point of coherency (Linux lets user
     * code run it), stepping by the smallest data cache line, which CTR_EL0.DminLine gives
     * (log2 of 4-byte words); DSB SY waits until it is done, as Linux's own flush does. */
    uint64_t ctr;
    __asm__ volatile("mrs %0, ctr_el0" : "=r"(ctr));
    uintptr_t step = (uintptr_t)4 << ((ctr >> 16) & 0xF);
    for (int32_t b = 0; b < num_buffers; ++b) {
      char* line = (char*)((uintptr_t)addresses[b] & ~(step - 1));
      for (; line < addresses[b] + sizes[b]; line += step)
        __asm__ volatile("dc civac, %0" : : "r"(line) : "memory");
    }
    __asm__ volatile("dsb sy" : : : "memory");
#endif
    double start = now();
    status = fn(args, num_args);
    total += now() - start;
  }
  *seconds = total;
  return status;
}
