/* Rounding for the JSON answers (scores, probabilities, milliseconds): x to `places` decimal
 * places, half away from zero. One helper for every front end, so the same figure prints the
 * same everywhere. */
#ifndef LQ_CORE_ROUND_H
#define LQ_CORE_ROUND_H

#include <math.h>

static inline double lq_round_dp(double x, int places)
{
    double p = 1.0;
    for (int i = 0; i < places; i++)
        p *= 10.0;
    return round(x * p) / p;
}

#endif
