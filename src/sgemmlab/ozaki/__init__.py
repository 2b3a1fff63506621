"""FP32-accurate products from INT8 products: Ozaki's scheme II (the integer, CRT form).

`reference` is the scheme in NumPy on the CPU, exact where the GPU's INT8 products are
exact: the specification the tensor-core kernels are checked against, and the model their
accuracy is predicted with. Nothing here launches a kernel.
"""
