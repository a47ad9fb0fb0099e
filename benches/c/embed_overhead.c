/* The C side of scripts/embed-overhead: ec_run's cost per run against the
   same loopback cloud lane the Rust and Python sides use, in one process.
   `embed_overhead CONFIG.toml RUNS` prints `c <p50 us> <p90 us>`. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "edgecloud.h"

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)n + 1);
    if (text && fread(text, 1, (size_t)n, f) != (size_t)n) {
        free(text);
        text = NULL;
    }
    if (text) text[n] = '\0';
    fclose(f);
    return text;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s CONFIG.toml RUNS\n", argv[0]);
        return 2;
    }
    int runs = atoi(argv[2]);
    char *config = read_file(argv[1]);
    char *error = NULL;
    ec_harness *h = config ? ec_harness_new(config, &error) : NULL;
    free(config);
    if (!h) {
        fprintf(stderr, "edgecloud: %s\n", error ? error : "cannot read the config");
        ec_string_free(error);
        return 1;
    }
    const char *request =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"What is the answer?\"}],\"max_tokens\":8}";
    double *us = malloc(sizeof(double) * (size_t)runs);
    for (int i = -50; i < runs; i++) { /* 50 warm-up runs first */
        char *outcome = NULL;
        double t = now_us();
        int status = ec_run(h, request, &outcome, &error);
        double took = now_us() - t;
        if (status != EC_OK) {
            fprintf(stderr, "edgecloud: %s\n", error);
            return 1;
        }
        ec_string_free(outcome);
        if (i >= 0) us[i] = took;
    }
    qsort(us, (size_t)runs, sizeof(double), by_value);
    printf("c %.1f %.1f\n", us[runs / 2], us[(runs * 9) / 10]);
    free(us);
    ec_harness_free(h);
    return 0;
}
