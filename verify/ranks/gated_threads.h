/* Starting the rank threads of one process, shared by the CPU ranks (verify/ranks/rank.c) and the
 * CUDA plugin (verify/backends/cuda/cuda_backend.cu, compiled as C++ by nvcc).  The threads meet at
 * barriers sized for all of them, so none may begin until every one was created: a thread
 * that could not be created would leave the others waiting at the first barrier forever.
 * Each thread first passes the gate, which opens once all were created, or closes so the
 * ones that were return at once. */
#ifndef TPS_VERIFY_GATED_THREADS_H
#define TPS_VERIFY_GATED_THREADS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct vgate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int state; /* 0 wait, 1 go, -1 stop */
} vgate;

#define VGATE_INIT {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0}

/* First thing in a rank thread: waits at the gate; true when the work may go ahead. */
static inline bool vgate_pass(vgate *g)
{
    pthread_mutex_lock(&g->mu);
    while (g->state == 0) pthread_cond_wait(&g->cv, &g->mu);
    int go = g->state;
    pthread_mutex_unlock(&g->mu);
    return go > 0;
}

/* Runs fn on the jobs (count of them, stride bytes apart) in threads tid[0..count) that
 * each pass g first, and joins them.  Returns how many were created: all of them, or the
 * index of the job whose thread could not be created (then none did any work). */
static inline uint64_t vgate_run(vgate *g, pthread_t *tid, uint64_t count, void *(*fn)(void *), void *jobs,
                                 size_t stride)
{
    uint64_t started = 0;
    while (started < count && pthread_create(&tid[started], NULL, fn, (char *)jobs + started * stride) == 0)
        started++;
    pthread_mutex_lock(&g->mu);
    g->state = started == count ? 1 : -1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    for (uint64_t i = 0; i < started; i++) pthread_join(tid[i], NULL);
    return started;
}

#endif
