/* Profiling of a forward's time (kernel_profile): off unless a profiled request runs, then the
 * kernels add seconds into the caller's accumulator, indexed by the P_* slots (kernel_abi.h).
 *
 *   P_MATMUL, P_ATTENTION, P_LAYER_OTHER: q8_layer's wall time in its linears, its attention and
 *     the rest (norms, rotary embeddings, the cache write, SwiGLU, residuals), master thread;
 *   P_TEAM: the wall time of the linears' parallel regions times the team size (thread-seconds
 *     the team was held); P_BUSY: of those, the seconds each thread spent in its share of the work
 *     (wall clock); P_BUSY_CPU: the same on the thread's CPU clock. TEAM - BUSY is waiting for the
 *     team (fork, join, an uneven split); BUSY - BUSY_CPU is time a computing thread was not on a
 *     CPU (preempted by another thread or process). P_REGIONS counts the parallel regions.
 *
 * Internal to the library: the accumulator pointer is shared by every translation unit. */
#ifndef SPECD_PROFILE_H
#define SPECD_PROFILE_H
#include <time.h>

/* weak: every file that includes this header defines it, the linker keeps one (a build of a single
 * kernel file, as tests/test_gguf_blocks.py's portable build, needs no other file for it) */
__attribute__((weak, visibility("hidden"))) double *specd_prof;

#if defined(CLOCK_MONOTONIC) && defined(CLOCK_THREAD_CPUTIME_ID)
static inline double prof_wall(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static inline double prof_cpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
#else /* strict ISO C without POSIX clocks (a portable build): profiling reads zero */
static inline double prof_wall(void) { return 0.0; }
static inline double prof_cpu(void) { return 0.0; }
#endif

/* inside a parallel region: prof_begin at the start of a thread's share, prof_end after it (both
 * no-ops when profiling is off); the master adds the region's team time with prof_region */
typedef struct { double wall, cpu; } prof_mark;

static inline prof_mark prof_begin(void) {
    prof_mark m = {0.0, 0.0};
    if (specd_prof) { m.wall = prof_wall(); m.cpu = prof_cpu(); }
    return m;
}

static inline void prof_end(prof_mark m) {
    if (!specd_prof) return;
    const double wall = prof_wall() - m.wall, cpu = prof_cpu() - m.cpu;
#pragma omp atomic
    specd_prof[P_BUSY] += wall;
#pragma omp atomic
    specd_prof[P_BUSY_CPU] += cpu;
}

static inline void prof_region(double t0, int team) {
    if (!specd_prof) return;
    specd_prof[P_TEAM] += (prof_wall() - t0) * team;
    specd_prof[P_REGIONS] += 1;
}

#endif
