/* kiln's thread pool: the one entry point generated code calls for a parallel loop.
 *
 * Built on the OpenMP runtime (libgomp): its worker threads persist between regions and spin
 * for a while before sleeping, so back-to-back launches cost microseconds. Generated code sees
 * only kiln_parallel_launch, never OpenMP itself, so the pool can change without touching the
 * code generators.
 */
#include <limits.h>
#include <omp.h>
#include <stdint.h>

typedef int32_t (*kiln_task_fn)(int32_t task_id, int32_t num_tasks, void* closure);

static int32_t kiln_pool_threads = 0; /* 0: not set yet, use OpenMP's default */

void kiln_set_num_threads(int32_t n) { kiln_pool_threads = n > 0 ? n : 0; }

int32_t kiln_get_num_threads(void) {
  return kiln_pool_threads > 0 ? kiln_pool_threads : omp_get_max_threads();
}

/* Task t of `total` runs on the thread owning the block it falls in; blocks keep the same
 * tasks on the same threads from one launch to the next, which keeps their caches warm. */
static int32_t run_block(kiln_task_fn task, void* closure, int32_t total, int32_t thread,
                         int32_t threads, int32_t* failed_task) {
  int32_t begin = (int32_t)((int64_t)total * thread / threads);
  int32_t end = (int32_t)((int64_t)total * (thread + 1) / threads);
  for (int32_t t = begin; t < end; ++t) {
    int32_t rc = task(t, total, closure);
    if (rc != 0) {
      *failed_task = t;
      return rc; /* later tasks of this block are skipped; they cannot fix the error */
    }
  }
  return 0;
}

int32_t kiln_parallel_launch(kiln_task_fn task, void* closure, int32_t num_tasks) {
  int32_t threads = kiln_get_num_threads();
  if (num_tasks > 0 && num_tasks < threads) threads = num_tasks; /* wake no idle threads */
  if (threads == 1 || omp_in_parallel()) {
    /* Nothing to share, or already inside a task: run inline, no region to open. */
    int32_t total = num_tasks > 0 ? num_tasks : 1, failed = 0;
    return run_block(task, closure, total, 0, 1, &failed);
  }
  int32_t first_task = INT32_MAX, first_rc = 0;
#pragma omp parallel num_threads(threads)
  {
    /* OpenMP may give fewer threads than asked for; share the tasks among those we got. */
    int32_t team = omp_get_num_threads();
    int32_t total = num_tasks > 0 ? num_tasks : team;
    int32_t failed = 0;
    int32_t rc = run_block(task, closure, total, omp_get_thread_num(), team, &failed);
    if (rc != 0) {
#pragma omp critical(kiln_parallel_launch_error)
      if (failed < first_task) {
        first_task = failed;
        first_rc = rc;
      }
    }
  }
  return first_rc;
}
