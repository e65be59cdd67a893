/* The library's identity: the ABI's own two functions (kernel_abi.h: the version, and the text
 * describing every exported function and index table, generated from the one list the prototypes
 * come from) and the Python extension module the package install builds (specd.models._kernels). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "kernel_abi.h"

/* the text as string literals: per parameter or table entry "," and its code; the comma right
 * after each '(' or '[' is dropped when the text is built (abi_text) */
#define KA_RET(code, type) #code
#define KA_ARG(code, decl) "," #code
#define KA_IDX(constant, text) "," #text
#define KA_FN_TEXT_(ret, name, params) #name "(" params ")->" ret ";"
#define KA_TABLE_TEXT_(name, code, count, entries) #name "[" entries "]->" #code ";"
static const char raw_text[] = SPECD_KERNEL_ABI(KA_FN_TEXT_, KA_TABLE_TEXT_);

static char text[sizeof raw_text];

/* raw_text without the comma after each '(' or '[' and without the last ';' (built once, when the
 * library is loaded) */
__attribute__((constructor)) static void abi_text(void) {
    char *o = text;
    for (const char *c = raw_text; *c; c++)
        if (!(*c == ',' && (c[-1] == '(' || c[-1] == '['))) *o++ = *c;
    if (o > text && o[-1] == ';') o--;
    *o = '\0';
}

int specd_kernel_abi_version(void) { return SPECD_KERNEL_ABI_VERSION; }
const char *specd_kernel_abi_signatures(void) { return text; }

/* an importable extension module with no Python-level functions: specd loads the C functions
 * above through ctypes */
static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_kernels", NULL, -1, NULL};
PyMODINIT_FUNC PyInit__kernels(void) { return PyModule_Create(&moduledef); }
