-- crescent.ops.loss — the loss op family's functions on cr and methods on Tensor.
return function(cr, Tensor, W) -- luacheck: no unused args
end
