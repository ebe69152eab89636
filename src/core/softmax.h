/* The softmax normaliser, in one place: every probability or log-likelihood the library
 * reports from logits (infer's predictions, perplexity, COMPOSE's balance) divides by it. */
#ifndef LQ_CORE_SOFTMAX_H
#define LQ_CORE_SOFTMAX_H

#include <math.h>
#include <stddef.h>

/* max of x[0..n) into *max, and the sum of exp(x[i] - max) in double (n >= 1): the
 * probability of i is exp(x[i] - *max) / sum. */
static inline double lq_softmax_denominator(const float *x, size_t n, double *max)
{
    float mx = x[0];
    for (size_t i = 1; i < n; i++)
        if (x[i] > mx)
            mx = x[i];
    double z = 0.0;
    for (size_t i = 0; i < n; i++)
        z += exp((double)x[i] - mx);
    *max = mx;
    return z;
}

#endif
