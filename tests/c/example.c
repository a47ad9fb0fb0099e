/* The whole example of docs/embedding.md: one request, streamed, on a
   local model with a cloud lane under one deadline. Run by tests/c/run as
   `example MODEL.gguf CORRUPT.gguf FAST_BASE_URL SLOW_BASE_URL`; on its own,
   `example MODEL.gguf` (no cloud lane). */
#include <stdio.h>
#include <string.h>

#include "edgecloud.h"

static void print_delta(const char *delta_json, void *user_data) {
    (void)user_data;
    /* {"content":"..."}: a real program would parse it with its JSON library. */
    fprintf(stderr, "delta %s\n", delta_json);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.gguf [CORRUPT.gguf BASE_URL]\n", argv[0]);
        return 2;
    }
    char config[2048];
    int n = snprintf(config, sizeof config,
                     "[local]\nmodel = \"%s\"\n"
                     "[harness]\npolicy = \"%s\"\ndeadline_ms = 5000\n",
                     argv[1], argc > 3 ? "race" : "local-only");
    if (argc > 3) /* an OpenAI-compatible endpoint as the cloud lane */
        snprintf(config + n, sizeof config - n, "[cloud]\nbase_url = \"%s\"\nmodel = \"m\"\n",
                 argv[3]);

    char *error = NULL;
    ec_harness *h = ec_harness_new(config, &error);
    if (!h) {
        fprintf(stderr, "edgecloud: %s\n", error);
        ec_string_free(error);
        return 1;
    }

    const char *request =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello!\"}],"
        "\"max_tokens\":16,\"seed\":7,"
        "\"edgecloud\":{\"deadline_ms\":3000}}";

    /* Blocking: the outcome is the JSON of `edgecloud run --json`. */
    char *outcome = NULL;
    ec_status s = ec_run(h, request, &outcome, &error);
    printf("%s: %s\n", ec_status_name(s), outcome ? outcome : error);
    ec_string_free(outcome);
    ec_string_free(error);

    /* Streaming: deltas arrive on an edgecloud thread; ec_handle_abort(run)
       from any thread would stop it. */
    ec_handle *run = ec_start(h, request, print_delta, NULL, &error);
    if (run) {
        s = ec_handle_wait(run, &outcome, &error);
        printf("streamed, %s: %.60s...\n", ec_status_name(s), outcome ? outcome : error);
        ec_string_free(outcome);
        ec_string_free(error);
        ec_handle_free(run);
    } else {
        fprintf(stderr, "edgecloud: %s\n", error);
        ec_string_free(error);
    }
    ec_harness_free(h);
    return s == EC_OK ? 0 : 1;
}
