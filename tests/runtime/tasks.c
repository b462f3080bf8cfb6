/* Task functions for kiln_parallel_launch, called the way generated code calls them. */
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#define MAX_TASKS 256

typedef int32_t (*task_fn)(int32_t task_id, int32_t num_tasks, void* closure);
typedef int32_t (*launch_fn)(task_fn task, void* closure, int32_t num_tasks);

typedef struct {
  int32_t runs[MAX_TASKS];        /* how often each task id ran */
  int32_t seen_num_tasks[MAX_TASKS];
  uint64_t thread_of[MAX_TASKS];  /* pthread_self() of the thread that ran it */
  int32_t fail_from;              /* tasks with id >= fail_from return 100 + id; -1: none fail */
  launch_fn launch;               /* for nested launches */
  int32_t nested_tasks;           /* tasks of the nested launch each task makes; 0: none */
  int32_t nested_runs;
} Record;

int32_t record_task(int32_t task_id, int32_t num_tasks, void* closure) {
  Record* r = (Record*)closure;
  if (task_id < 0 || task_id >= MAX_TASKS) return -1;
  __atomic_fetch_add(&r->runs[task_id], 1, __ATOMIC_RELAXED);
  r->seen_num_tasks[task_id] = num_tasks;
  r->thread_of[task_id] = (uint64_t)pthread_self();
  if (r->fail_from >= 0 && task_id >= r->fail_from) return 100 + task_id;
  return 0;
}

static int32_t nested_inner(int32_t task_id, int32_t num_tasks, void* closure) {
  (void)task_id;
  (void)num_tasks;
  __atomic_fetch_add(&((Record*)closure)->nested_runs, 1, __ATOMIC_RELAXED);
  return 0;
}

int32_t nesting_task(int32_t task_id, int32_t num_tasks, void* closure) {
  Record* r = (Record*)closure;
  int32_t rc = record_task(task_id, num_tasks, closure);
  if (rc != 0) return rc;
  return r->launch(nested_inner, closure, r->nested_tasks);
}

static int32_t empty_task(int32_t task_id, int32_t num_tasks, void* closure) {
  (void)task_id;
  (void)num_tasks;
  (void)closure;
  return 0;
}

/* Mean seconds per launch of `num_tasks` empty tasks, over `iterations` launches. */
double time_launches(launch_fn launch, int64_t iterations, int32_t num_tasks) {
  struct timespec start, stop;
  launch(empty_task, 0, num_tasks); /* wake the pool */
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (int64_t i = 0; i < iterations; ++i) launch(empty_task, 0, num_tasks);
  clock_gettime(CLOCK_MONOTONIC, &stop);
  return ((double)(stop.tv_sec - start.tv_sec) + 1e-9 * (double)(stop.tv_nsec - start.tv_nsec))
         / (double)iterations;
}
