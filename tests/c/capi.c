/*
 * The C API end to end, against the built library (tests/c/run compiles
 * it with -Wall -Werror -fsanitize=address,undefined and runs it; the
 * leak check at exit proves every handle and string was freed).
 *
 * Real parts only: the generated tiny GGUF model on the local lane, and
 * scripts/loopback-cloud (a real OpenAI-compatible HTTP server on
 * loopback, a stand-in for a provider) on the cloud lane: a fast one, and
 * a slow one whose first byte comes after a minute (so a run on it
 * settles by its deadline or by an abort, never by an answer).
 *
 * Usage: capi MODEL.gguf FAST_BASE_URL SLOW_BASE_URL
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "edgecloud.h"

static const char *model, *fast_url, *slow_url;
static pthread_t main_thread;
static int checks;

#define CHECK(cond, ...)                                                     \
    do {                                                                     \
        checks++;                                                            \
        if (!(cond)) {                                                       \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, \
                    #cond);                                                  \
            fprintf(stderr, __VA_ARGS__);                                    \
            fprintf(stderr, "\n");                                           \
            exit(1);                                                         \
        }                                                                    \
    } while (0)

#define NONNULL(s) ((s) ? (s) : "(null)")

static char *config(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *config(const char *fmt, ...) {
    static char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return buf;
}

static ec_harness *harness_or_die(const char *toml, const ec_callbacks *cbs) {
    char *error = NULL;
    ec_harness *h = ec_harness_new_with(toml, cbs, &error);
    CHECK(h != NULL, "ec_harness_new_with: %s", NONNULL(error));
    CHECK(error == NULL, "no error on success");
    return h;
}

static const char *HI =
    "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello!\"}],"
    "\"max_tokens\":8,\"seed\":7}";

static void test_version_and_status_names(void) {
    CHECK(strlen(ec_version()) > 0, "a version");
    CHECK(strcmp(ec_status_name(EC_ERR_DEADLINE), "EC_ERR_DEADLINE") == 0, "names");
    CHECK(strcmp(ec_status_name(12345), "EC_ERR_UNKNOWN") == 0, "unknown");
}

static void expect_config_error(const char *toml, ec_status want, const char *says) {
    ec_harness *h = (ec_harness *)1;
    char *error = NULL;
    ec_status s = ec_harness_create(toml, NULL, &h, &error);
    CHECK(s == want, "status %s, want %s: %s", ec_status_name(s), ec_status_name(want),
          NONNULL(error));
    CHECK(h == NULL, "no harness on failure");
    CHECK(error && strstr(error, says), "error names %s: %s", says, NONNULL(error));
    ec_string_free(error);
}

static void test_bad_config(const char *corrupt) {
    expect_config_error("[harness]\npolicy = \"racer\"\n", EC_ERR_CONFIG, "racer");
    expect_config_error("[harness]\ndeadlin_ms = 3\n", EC_ERR_CONFIG, "deadlin_ms");
    expect_config_error("", EC_ERR_CONFIG, "no lane");
    expect_config_error("[local]\nmodel = \"/nonexistent/m.gguf\"\n", EC_ERR_MODEL,
                        "/nonexistent/m.gguf");
    expect_config_error(config("[local]\nmodel = \"%s\"\n", corrupt), EC_ERR_MODEL, "local");
    expect_config_error(NULL, EC_ERR_INVALID_ARGUMENT, "config_toml");
    /* A NULL error pointer is fine too. */
    CHECK(ec_harness_new("[harness]\npolicy = \"racer\"\n", NULL) == NULL, "refused");
    ec_harness_free(NULL);
}

static void test_run_and_invalid_requests(void) {
    ec_harness *h = harness_or_die(
        config("[local]\nmodel = \"%s\"\n[harness]\npolicy = \"local-only\"\n", model), NULL);
    char *outcome = NULL, *error = NULL;
    ec_status s = ec_run(h, HI, &outcome, &error);
    CHECK(s == EC_OK, "%s: %s", ec_status_name(s), NONNULL(error));
    CHECK(error == NULL, "no error");
    CHECK(outcome && strstr(outcome, "\"status\":\"ok\"") &&
              strstr(outcome, "\"winner\":\"local\"") && strstr(outcome, "\"text\":"),
          "the outcome JSON: %s", NONNULL(outcome));
    ec_string_free(outcome);

    /* Invalid JSON requests: a typed status, the field named, no outcome. */
    const char *bad[][2] = {
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"temperature\":\"hot\"}",
         "temperature"},
        {"{\"messages\":[{\"role\":\"wizard\",\"content\":\"hi\"}]}", "messages[0].role"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
         "\"edgecloud\":{\"deadline_ms\":0}}",
         "edgecloud.deadline_ms"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"n\":3}", "n"},
        {"{\"messages\": [", "not valid JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        outcome = (char *)1;
        s = ec_run(h, bad[i][0], &outcome, &error);
        CHECK(s == EC_ERR_INVALID_REQUEST, "%s for %s", ec_status_name(s), bad[i][0]);
        CHECK(outcome == NULL, "no outcome for an invalid request");
        CHECK(error && strstr(error, bad[i][1]), "names %s: %s", bad[i][1], NONNULL(error));
        ec_string_free(error);
        CHECK(ec_start(h, bad[i][0], NULL, NULL, &error) == NULL, "ec_start refuses it too");
        CHECK(error && strstr(error, bad[i][1]), "names %s: %s", bad[i][1], NONNULL(error));
        ec_string_free(error);
    }
    CHECK(ec_run(h, NULL, NULL, NULL) == EC_ERR_INVALID_ARGUMENT, "NULL request");
    CHECK(ec_run(NULL, HI, NULL, NULL) == EC_ERR_INVALID_ARGUMENT, "NULL harness");

    /* The harness is still usable. */
    s = ec_run(h, HI, NULL, &error);
    CHECK(s == EC_OK, "after bad requests: %s %s", ec_status_name(s), NONNULL(error));
    ec_harness_free(h);
}

struct deltas {
    pthread_mutex_t lock;
    int count;
    int on_main;
    int well_formed;
};

static void on_delta(const char *delta_json, void *user_data) {
    struct deltas *d = user_data;
    pthread_mutex_lock(&d->lock);
    d->count++;
    d->on_main += pthread_equal(pthread_self(), main_thread);
    d->well_formed += strncmp(delta_json, "{\"content\":", 11) == 0;
    pthread_mutex_unlock(&d->lock);
}

static void test_stream(void) {
    ec_harness *h = harness_or_die(
        config("[local]\nmodel = \"%s\"\n[harness]\npolicy = \"local-only\"\n", model), NULL);
    struct deltas d = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0};
    char *outcome = NULL, *error = NULL;
    ec_handle *run = ec_start(h, HI, on_delta, &d, &error);
    CHECK(run != NULL, "ec_start: %s", NONNULL(error));
    ec_status s = ec_handle_wait(run, &outcome, &error);
    CHECK(s == EC_OK, "%s: %s", ec_status_name(s), NONNULL(error));
    CHECK(d.count > 0 && d.well_formed == d.count, "%d deltas, %d well formed", d.count,
          d.well_formed);
    CHECK(d.on_main == 0, "deltas come on an edgecloud thread");
    CHECK(strstr(outcome, "\"winner\":\"local\""), "%s", outcome);
    ec_string_free(outcome);
    /* Waiting again gives the same result. */
    s = ec_handle_wait(run, &outcome, NULL);
    CHECK(s == EC_OK && outcome, "a second wait: %s", ec_status_name(s));
    ec_string_free(outcome);
    CHECK(!ec_handle_abort(run), "a settled run is not aborted");
    ec_handle_free(run);
    ec_harness_free(h);
}

struct calls {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int scored, arbitrated, on_main;
    int block; /* the scorer waits until `block` is 0 */
    int blocked;
};

static double score(const char *candidate_json, void *user_data) {
    struct calls *c = user_data;
    pthread_mutex_lock(&c->lock);
    c->scored++;
    c->on_main += pthread_equal(pthread_self(), main_thread);
    c->blocked += c->block;
    pthread_cond_broadcast(&c->changed);
    while (c->block)
        pthread_cond_wait(&c->changed, &c->lock);
    pthread_mutex_unlock(&c->lock);
    return strstr(candidate_json, "\"candidate\":") ? 0.5 : NAN;
}

static int32_t arbitrate(const char *candidates_json, void *user_data) {
    struct calls *c = user_data;
    pthread_mutex_lock(&c->lock);
    c->arbitrated++;
    c->on_main += pthread_equal(pthread_self(), main_thread);
    pthread_mutex_unlock(&c->lock);
    /* Pick the cloud's candidate: the one whose "lane" comes first or second. */
    const char *cloud = strstr(candidates_json, "\"lane\":\"cloud\"");
    const char *local = strstr(candidates_json, "\"lane\":\"local\"");
    if (!cloud)
        return EC_ARBITRATE_DEFAULT;
    return local && local < cloud ? 1 : 0;
}

static void test_callbacks(void) {
    struct calls c = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, 0};
    ec_callbacks cbs = {score, arbitrate, &c};
    ec_harness *h = harness_or_die(
        config("[local]\nmodel = \"%s\"\n[cloud]\nbase_url = \"%s\"\nmodel = \"loopback\"\n"
               "[harness]\npolicy = \"best-of\"\ndeadline_ms = 60000\n",
               model, fast_url),
        &cbs);
    char *outcome = NULL, *error = NULL;
    ec_status s = ec_run(h, HI, &outcome, &error);
    CHECK(s == EC_OK, "%s: %s", ec_status_name(s), NONNULL(error));
    CHECK(c.scored == 2 && c.arbitrated == 1, "scored %d, arbitrated %d", c.scored,
          c.arbitrated);
    CHECK(c.on_main == 0, "callbacks run on edgecloud's threads");
    CHECK(strstr(outcome, "\"winner\":\"cloud\"") && strstr(outcome, "\"decided_by\":\"arbiter\""),
          "the arbiter's pick wins: %s", outcome);
    ec_string_free(outcome);

    /* A scorer that does not return: the run settles by its deadline all
       the same, the call is reported timed out, the harness goes on. */
    pthread_mutex_lock(&c.lock);
    c.block = 1;
    pthread_mutex_unlock(&c.lock);
    s = ec_run(h,
               "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":4,"
               "\"edgecloud\":{\"policy\":\"local-only\",\"deadline_ms\":300}}",
               &outcome, &error);
    CHECK(outcome && strstr(outcome, "\"status\":\"timed_out\""),
          "the stuck scorer is reported: %s %s", ec_status_name(s), NONNULL(outcome));
    ec_string_free(outcome);
    ec_string_free(error);
    pthread_mutex_lock(&c.lock);
    CHECK(c.blocked == 1, "the scorer was stuck once");
    c.block = 0;
    pthread_cond_broadcast(&c.changed);
    pthread_mutex_unlock(&c.lock);
    s = ec_run(h,
               "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":4,"
               "\"edgecloud\":{\"policy\":\"local-only\"}}",
               NULL, &error);
    CHECK(s == EC_OK, "usable after a stuck callback: %s %s", ec_status_name(s),
          NONNULL(error));
    /* Returns once no callback is running: `c` may go away after it. */
    ec_harness_free(h);
}

static void test_deadline(void) {
    ec_harness *h = harness_or_die(
        config("[cloud]\nbase_url = \"%s\"\nmodel = \"loopback\"\n"
               "[harness]\npolicy = \"cloud-only\"\ndeadline_ms = 60000\n",
               slow_url),
        NULL);
    char *outcome = NULL, *error = NULL;
    ec_status s = ec_run(h,
                         "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                         "\"edgecloud\":{\"deadline_ms\":200}}",
                         &outcome, &error);
    CHECK(s == EC_ERR_DEADLINE, "%s: %s", ec_status_name(s), NONNULL(error));
    CHECK(error != NULL, "the error says why");
    CHECK(outcome && strstr(outcome, "\"status\":\"deadline_exceeded\"") &&
              strstr(outcome, "\"winner\":null"),
          "%s", NONNULL(outcome));
    ec_string_free(outcome);
    ec_string_free(error);
    ec_harness_free(h);
}

static void *abort_twice(void *handle) {
    static int results[2];
    results[0] = ec_handle_abort(handle);
    results[1] = ec_handle_abort(handle);
    return results;
}

static void test_abort_and_busy(void) {
    ec_harness *h = harness_or_die(
        config("[cloud]\nbase_url = \"%s\"\nmodel = \"loopback\"\n"
               "[harness]\npolicy = \"cloud-only\"\ndeadline_ms = 60000\n",
               slow_url),
        NULL);
    struct deltas d = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0};
    char *outcome = NULL, *error = NULL;
    ec_handle *run = ec_start(h, HI, on_delta, &d, &error);
    CHECK(run != NULL, "ec_start: %s", NONNULL(error));

    /* The one cloud lane is taken by that run: another is refused at once. */
    ec_status s = ec_run(h, HI, &outcome, &error);
    CHECK(s == EC_ERR_BUSY, "%s: %s", ec_status_name(s), NONNULL(error));
    ec_string_free(outcome);
    ec_string_free(error);

    pthread_t t;
    CHECK(pthread_create(&t, NULL, abort_twice, run) == 0, "a second thread");
    int *results;
    pthread_join(t, (void **)&results);
    CHECK(results[0] == 1 && results[1] == 0, "the first abort counts, the second is a no-op");
    s = ec_handle_wait(run, &outcome, &error);
    CHECK(s == EC_ERR_ABORTED, "%s: %s", ec_status_name(s), NONNULL(error));
    CHECK(outcome && strstr(outcome, "\"status\":\"aborted\""), "%s", NONNULL(outcome));
    CHECK(d.count == 0, "nothing was streamed");
    ec_string_free(outcome);
    ec_string_free(error);
    ec_handle_free(run);

    /* A handle freed while its run is in flight: the run is aborted. */
    run = ec_start(h, HI, NULL, NULL, NULL);
    CHECK(run != NULL || 1, "started or busy (the last late worker may hold the lane)");
    ec_handle_free(run);
    ec_harness_free(h);
}

/* Before exit with a run in flight: abort it, then shut the harness down,
   which returns once every worker has (the local lane decoding here). */
static void test_shutdown(void) {
    ec_harness *h = harness_or_die(
        config("[local]\nmodel = \"%s\"\n[harness]\npolicy = \"local-only\"\n"
               "deadline_ms = 60000\n",
               model),
        NULL);
    char *outcome = NULL, *error = NULL;
    ec_handle *run = ec_start(h,
                              "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                              "\"max_tokens\":512,\"seed\":1}",
                              NULL, NULL, &error);
    CHECK(run != NULL, "ec_start: %s", NONNULL(error));
    CHECK(ec_handle_abort(run), "the run was in flight");
    ec_status s = ec_harness_shutdown(h, 30000, &error);
    CHECK(s == EC_OK, "%s: %s", ec_status_name(s), NONNULL(error));
    s = ec_run(h, HI, &outcome, &error);
    CHECK(s == EC_ERR_INTERNAL && error, "a run after shutdown: %s", ec_status_name(s));
    ec_string_free(outcome);
    ec_string_free(error);
    CHECK(ec_harness_shutdown(NULL, 0, NULL) == EC_ERR_INVALID_ARGUMENT, "NULL is refused");
    ec_handle_free(run);
    ec_harness_free(h);
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s MODEL.gguf CORRUPT.gguf FAST_BASE_URL SLOW_BASE_URL\n",
                argv[0]);
        return 2;
    }
    model = argv[1];
    fast_url = argv[3];
    slow_url = argv[4];
    main_thread = pthread_self();
    test_version_and_status_names();
    test_bad_config(argv[2]);
    test_run_and_invalid_requests();
    test_stream();
    test_callbacks();
    test_deadline();
    test_abort_and_busy();
    test_shutdown();
    printf("capi: %d checks passed (edgecloud %s)\n", checks, ec_version());
    return 0;
}
