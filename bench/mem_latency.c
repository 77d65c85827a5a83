/* Latency of a dependent load by working-set size (docs/performance.md, issue 34's ninth
 * round): a pointer chase over a random cyclic permutation of 64-byte lines, 20 M loads
 * per size, so each load waits for the one before it.
 *
 *   gcc -O2 -o /tmp/mem_latency bench/mem_latency.c && /tmp/mem_latency
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
int main(void) {
    size_t sizes[] = {16<<10, 32<<10, 256<<10, 768<<10, 1<<20, 2<<20, 4<<20, 8<<20, 16<<20, 64<<20};
    for (int s = 0; s < 10; s++) {
        size_t n = sizes[s] / 64;
        char *buf = aligned_alloc(64, n * 64);
        size_t *perm = malloc(n * sizeof(size_t));
        for (size_t i = 0; i < n; i++) perm[i] = i;
        srand(1);
        for (size_t i = n - 1; i > 0; i--) { size_t j = rand() % (i + 1); size_t t = perm[i]; perm[i] = perm[j]; perm[j] = t; }
        for (size_t i = 0; i < n; i++) *(void **)(buf + perm[i] * 64) = buf + perm[(i + 1) % n] * 64;
        void **p = (void **)(buf + perm[0] * 64);
        long iters = 20000000;
        for (long i = 0; i < n; i++) p = (void **)*p;
        struct timespec a, b; clock_gettime(CLOCK_MONOTONIC, &a);
        for (long i = 0; i < iters; i++) p = (void **)*p;
        clock_gettime(CLOCK_MONOTONIC, &b);
        double ns = ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / iters;
        printf("%6zu KiB: %5.1f ns per load %p\n", sizes[s] >> 10, ns, (void *)p);
        free(buf); free(perm);
    }
    return 0;
}
