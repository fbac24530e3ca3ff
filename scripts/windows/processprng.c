/* ProcessPrng for Wine 8, which lacks it.
 *
 * Rust's standard library (1.78 and later) imports ProcessPrng from bcryptprimitives.dll to
 * seed its hash maps; Wine 8 has no such export, so every Rust exe exits with code 53 before
 * main. This DLL provides it on top of RtlGenRandom (advapi32's SystemFunction036), which
 * takes a 32-bit length: larger requests are served in chunks. Only the Wine test prefix
 * gets it; a real Windows has the genuine one.
 */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

/* RtlGenRandom's length is a ULONG; ask for at most this much per call. */
#define CHUNK 0x40000000u

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
    while (len > 0) {
        ULONG n = len > CHUNK ? CHUNK : (ULONG)len;
        if (!SystemFunction036(data, n))
            return FALSE;
        data += n;
        len -= n;
    }
    return TRUE;
}
