package uring

import "unsafe"

func ptr(p []byte) unsafe.Pointer { return unsafe.Pointer(&p[0]) }
