// A small JSON reader (RFC 8259) for the files other tools write: Hugging Face config.json and
// model.safetensors.index.json (stg import), stg's own JSON-lines logs (stg plot). The whole text is
// parsed into a tree of values; strings are decoded to UTF-8 (every escape, surrogate pairs), numbers
// to double. Strict: one value and nothing but white space after it, no trailing commas, no
// comments, nesting at most 64 deep, invalid UTF-8 refused; errors name the byte offset.
#ifndef STG_RUNTIME_JSON_H
#define STG_RUNTIME_JSON_H

#include <stdbool.h>
#include <stddef.h>

#include "ops/base/err.h"

typedef enum { RT_JSON_NULL, RT_JSON_BOOL, RT_JSON_NUMBER, RT_JSON_STRING, RT_JSON_ARRAY, RT_JSON_OBJECT } rt_json_type;

typedef struct rt_json {
    rt_json_type type;
    bool b;
    double num;
    char *str;             // RT_JSON_STRING: NUL-terminated (may hold no NUL: "\u0000" is refused)
    int n;                 // array items or object members
    struct rt_json *items; // (n) values
    char **keys;           // RT_JSON_OBJECT: (n) member names, in the text's order (duplicates refused)
} rt_json;

// Parses text[0..len); *out is a new tree (rt_json_free). Messages start with `what` (e.g. a path).
int rt_json_parse(const char *text, size_t len, const char *what, rt_json **out, stg_err *err);
void rt_json_free(rt_json *v);
// An object's member by name (NULL when absent or v is no object).
const rt_json *rt_json_get(const rt_json *v, const char *key);

#endif
