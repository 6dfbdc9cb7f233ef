package sidecar

import (
	"slices"
	"sync"
)

// Message buffers are pooled by size class: a tap decoding 1 MiB requests
// hundreds of times a second would otherwise allocate and zero a fresh
// megabyte per call and keep the garbage collector busy on the relay's
// goroutines. Classes grow by a quarter of a power of two (1, 1.25, 1.5,
// 1.75 KiB, 2 KiB, ...), so a buffer is at most 25% larger than its
// message; its whole capacity counts against the budget.
var bufferSizes = func() []int {
	var sizes []int
	for p := 1 << 10; p < maxMessageBytes; p <<= 1 {
		sizes = append(sizes, p, p+p/4, p+p/2, p+3*p/4)
	}
	return append(sizes, maxMessageBytes)
}()

var bufferPools = make([]sync.Pool, len(bufferSizes))

// bufferClass is the index of the smallest class whose buffers hold n bytes.
func bufferClass(n int) int {
	c, _ := slices.BinarySearch(bufferSizes, n)
	return c
}

// bufferSize is the capacity of the buffers getBuffer(n) returns.
func bufferSize(n int) int { return bufferSizes[bufferClass(n)] }

// getBuffer returns an empty buffer with room for n bytes (n at most
// maxMessageBytes).
func getBuffer(n int) []byte {
	c := bufferClass(n)
	if b, ok := bufferPools[c].Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return make([]byte, 0, bufferSizes[c])
}

// putBuffer returns b to its pool. A request may hold secrets: wipe says to
// clear what it held first, so they do not outlive the call in the pool.
func putBuffer(b []byte, wipe bool) {
	if wipe {
		clear(b)
	}
	c, exact := slices.BinarySearch(bufferSizes, cap(b))
	if !exact {
		return
	}
	// A copy: taking b's own address would move the parameter to the heap,
	// an allocation on every call, the many with nothing to return included.
	kept := b[:0]
	bufferPools[c].Put(&kept)
}
