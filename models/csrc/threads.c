/* The kernels' OpenMP team and profiling accumulator, shared by every kernel file. Built for
 * every architecture (no SIMD). */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* profile.h's clock_gettime clocks under -std=c11 */
#endif
#ifdef _OPENMP
#include <omp.h>
#else
static int omp_get_max_threads(void) { return 1; }
#endif
#include <stddef.h>

#include "kernel_abi.h"
#include "profile.h"

/* ---------------------------------------------------------------------------------------- */
/* threads: OpenMP. torch's CPU build ships libgomp with the same soname, so once torch is      */
/* loaded this library joins torch's thread pool instead of starting a second one (two pools on */
/* two cores would take turns spinning on each other's cores); torch.set_num_threads applies.   */
/* The loader checks that sharing (specd_kernel_omp_entry); where the runtime is not torch's it  */
/* fixes this library's team size once (specd_kernel_set_threads).                              */

double *specd_prof; /* profile.h: NULL unless a profiled forward runs */

/* profile.h: add the kernels' phase seconds into acc[P_COUNT] from now on (NULL: stop) */
void kernel_profile(double *acc) { specd_prof = acc; }

static int team_threads; /* 0: OpenMP's own count (torch's, when the runtime is shared) */

/* the team size of every parallel region in the kernels: the count set by
 * specd_kernel_set_threads, else omp_get_max_threads() (what a region without a num_threads
 * clause would get) */
int specd_team_size(void) { return team_threads > 0 ? team_threads : omp_get_max_threads(); }

/* fixes the team size of the kernels' parallel regions at n threads (0: OpenMP's own count) */
void specd_kernel_set_threads(int n) { team_threads = n > 0 ? n : 0; }

/* the omp_get_max_threads this library is bound to, which identifies its OpenMP runtime (the
 * loader compares it with torch's); NULL when built without OpenMP */
void *specd_kernel_omp_entry(void) {
#ifdef _OPENMP
    return (void *)&omp_get_max_threads;
#else
    return NULL;
#endif
}
