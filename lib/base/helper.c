#include "helper.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

struct tps_helper {
    pthread_t tid;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    enum { IDLE, POSTED, DONE, QUIT } state;
    tps_job_fn fn;
    void *arg;
    tps_status st;
    tps_error err;
};

static void *helper_main(void *p)
{
    tps_helper *h = p;
    pthread_mutex_lock(&h->mu);
    for (;;) {
        while (h->state != POSTED && h->state != QUIT) pthread_cond_wait(&h->cv, &h->mu);
        if (h->state == QUIT) break;
        pthread_mutex_unlock(&h->mu);
        tps_error_clear(&h->err);
        tps_status st = h->fn(h->arg, &h->err);
        pthread_mutex_lock(&h->mu);
        h->st = st;
        h->state = DONE;
        pthread_cond_broadcast(&h->cv);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

tps_status tps_helper_start(tps_helper **out, tps_error *err)
{
    *out = NULL;
    tps_helper *h = calloc(1, sizeof *h);
    if (!h) return tps_fail_oom(err, "a writer thread");
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    h->state = IDLE;
    if (pthread_create(&h->tid, NULL, helper_main, h) != 0) {
        pthread_cond_destroy(&h->cv);
        pthread_mutex_destroy(&h->mu);
        free(h);
        return tps_fail(err, TPS_EIO, "cannot start a writer thread");
    }
    *out = h;
    return TPS_OK;
}

void tps_helper_post(tps_helper *h, tps_job_fn fn, void *arg)
{
    pthread_mutex_lock(&h->mu);
    h->fn = fn;
    h->arg = arg;
    h->state = POSTED;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

tps_status tps_helper_wait(tps_helper *h, tps_error *err)
{
    pthread_mutex_lock(&h->mu);
    while (h->state == POSTED) pthread_cond_wait(&h->cv, &h->mu);
    tps_status st = h->state == DONE ? h->st : TPS_OK;
    h->state = IDLE;
    pthread_mutex_unlock(&h->mu);
    if (st != TPS_OK) tps_fail(err, st, "%s", h->err.msg);
    return st;
}

void tps_helper_stop(tps_helper *h)
{
    if (!h) return;
    pthread_mutex_lock(&h->mu);
    while (h->state == POSTED) pthread_cond_wait(&h->cv, &h->mu);
    h->state = QUIT;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    pthread_join(h->tid, NULL);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    free(h);
}
